"""Survivors that carry on when ranks die (ULFM): the revocable communicator, failure detection, the shrink and the
rebuild of torch's groups, and the training loop that resumes.
"""
