// The segmented ring of point-to-point messages that reduce_scatter and large all_reduces run on (ring.py's, in
// C++), and the requests it posts: none is left in flight when a ring returns or throws.
#pragma once

#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <mutex>
#include <vector>

#include "common.h"

namespace hpcdist_native {

// What became of the requests errors left in flight, for the tests: completed, or abandoned with their memory kept.
struct Leftovers {
  std::atomic<int64_t> completed{0}, abandoned{0};
};
inline Leftovers& leftovers() {
  static Leftovers* counts = new Leftovers();
  return *counts;
}

// Keep memory that abandoned requests may still read or write until the process ends.
inline void keep_forever(const Tensors& memory) {
  static std::mutex mutex;
  static Tensors* kept = new Tensors();
  std::lock_guard<std::mutex> lock(mutex);
  kept->insert(kept->end(), memory.begin(), memory.end());
}

// The requests of a ring's messages in flight (two segments: receives at even indices, sends at odd) and the
// memory they use. Leaving the ring by an error, the destructor completes the ones still in flight: receives are
// cancelled (MPI-4 deprecates cancelling sends, not receives), sends waited for; after a process failure the
// communicator was revoked first (NativeBackend::check), which completes every one of them. Any still pending
// after `patience` (a peer alive but gone elsewhere, without ULFM) is freed and its memory kept for good.
class Posted {
 public:
  Posted(Tensors memory, ms patience) : memory_(std::move(memory)), patience_(patience) {
    requests_.fill(MPI_REQUEST_NULL);
  }
  Posted(const Posted&) = delete;
  Posted& operator=(const Posted&) = delete;
  ~Posted() { settle(); }

  MPI_Request* pair(int64_t segment) { return &requests_[2 * (segment % 2)]; }

 private:
  bool idle() const {
    return std::all_of(requests_.begin(), requests_.end(), [](MPI_Request r) { return r == MPI_REQUEST_NULL; });
  }

  void settle() noexcept {
    if (idle()) return;  // the usual way out: every message arrived
    int64_t left = 0;
    for (size_t i = 0; i < requests_.size(); ++i) {
      if (requests_[i] == MPI_REQUEST_NULL) continue;
      ++left;
      if (i % 2 == 0) MPI_Cancel(&requests_[i]);
    }
    const int64_t deadline = now_ns() + patience_.count() * 1000000;
    int64_t abandoned = 0;
    while (!idle() && now_ns() < deadline) {
      for (MPI_Request& r : requests_) {  // a request MPI failed to test but did not free is past completing
        int done = 0;
        if (r != MPI_REQUEST_NULL && MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) abandoned += abandon(r);
      }
      sched_yield();
    }
    for (MPI_Request& r : requests_) abandoned += abandon(r);
    leftovers().completed += left - abandoned;
    leftovers().abandoned += abandoned;
    if (abandoned) keep_forever(memory_);
  }

  // Free a request still in flight (its operation may yet touch its memory); whether there was one.
  static int abandon(MPI_Request& r) {
    if (r == MPI_REQUEST_NULL) return 0;
    MPI_Request_free(&r);
    r = MPI_REQUEST_NULL;
    return 1;
  }

  std::array<MPI_Request, 4> requests_;
  Tensors memory_;
  ms patience_;
};

// A ring over a communicator of its own (the Python group's ring communicator): `check` throws the group's error
// for a failed MPI call (revoking the communicators first after a process failure). With `survivors` (ULFM, the
// survivors carry on) a wait also ends, as failed, once the communicator is revoked or a member failed (`interrupted`).
class Ring {
 public:
  using Check = std::function<void(int code, const char* name)>;

  Ring(MPI_Comm comm, int rank, int size, int tag, int64_t segment, ms patience, bool survivors, Check check)
      : comm_(comm), rank_(rank), size_(size), tag_(tag), segment_(segment), patience_(patience),
        survivors_(survivors), check_(std::move(check)) {}

  // An all_reduce in place: the reduce-scatter half (`reduce`), then p-1 steps passing the finished blocks on. At
  // 2 ranks it moves half the bytes of Open MPI's Allreduce.
  void all_reduce(at::Tensor& t, MPI_Datatype type, MPI_Op op, const char* name) {
    const int p = size_, r = rank_, right = (r + 1) % p, left = (r + p - 1) % p;
    const int item = static_cast<int>(t.element_size());
    const int64_t n = t.numel();
    char* base = static_cast<char*>(t.data_ptr());
    std::vector<const char*> mine;
    std::vector<char*> block;
    std::vector<int64_t> counts;
    for (int b = 0; b < p; ++b) {
      block.push_back(base + n * b / p * item);
      mine.push_back(block.back());
      counts.push_back(n * (b + 1) / p - n * b / p);
    }
    reduce(mine, counts, item, [&](int, int b) { return block[b]; }, type, op, name, {t});
    Posted posted({t}, patience_);
    for (int step = 0; step < p - 1; ++step) {  // this rank's block is done; then the one from the left each step
      const int sent = (r + p - step) % p, received = (r + 2 * p - 1 - step) % p;
      MPI_Request* pair = posted.pair(0);
      int code = MPI_Irecv(block[received], static_cast<int>(counts[received] * item), MPI_BYTE, left, tag_, comm_,
                           &pair[0]);
      if (code == MPI_SUCCESS) {
        code = MPI_Isend(block[sent], static_cast<int>(counts[sent] * item), MPI_BYTE, right, tag_, comm_, &pair[1]);
      }
      check_(code == MPI_SUCCESS ? wait_all(pair) : code, name);
    }
  }

  // reduce_scatter: `from` holds every rank's block of the input (out.numel() elements each; `inputs` owns that
  // memory); `out` may be this rank's block of it (torch's in-place form, which MPI's Reduce_scatter_block forbids).
  void reduce_scatter(const std::vector<const char*>& from, const Tensors& inputs, at::Tensor& out, MPI_Datatype type,
                      MPI_Op op, const char* name) {
    const int64_t bytes = static_cast<int64_t>(out.nbytes());
    char* result = static_cast<char*>(out.data_ptr());
    at::Tensor partials = size_ > 2 ? at::empty({2 * bytes}, at::kByte) : at::Tensor();  // the blocks passed on
    char* partial = size_ > 2 ? static_cast<char*>(partials.data_ptr()) : nullptr;
    auto keep = [&](int step, int) { return step == size_ - 2 ? result : partial + step % 2 * bytes; };
    Tensors memory(inputs);
    memory.push_back(out);
    if (partials.defined()) memory.push_back(partials);
    reduce(from, std::vector<int64_t>(size_, out.numel()), static_cast<int>(out.element_size()), keep, type, op, name,
           memory);
  }

 private:
  // Wait for a pair of requests, yielding the CPU between tests: on a core of its own sched_yield returns at once,
  // and where other processes share the cores the peer gets to run (measured faster than MPI_Waitall under load).
  // A failed request's own error, not MPI_ERR_IN_STATUS: a lost peer must read as one (ULFM's error classes). With
  // `survivors_`, every kLookNs the wait also ends with the error of a revoked or failed communicator.
  int wait_all(MPI_Request* pair) const {
    MPI_Status statuses[2];
    int64_t look = survivors_ ? now_ns() + kLookNs : 0;
    for (int done = 0;;) {
      const int code = MPI_Testall(2, pair, &done, statuses);
      if (code != MPI_SUCCESS) return in_status(code, statuses);
      if (done) return code;
      if (look && now_ns() > look) {
        const int broken = interrupted(comm_);
        if (broken != MPI_SUCCESS) return broken;
        look = now_ns() + kLookNs;
      }
      sched_yield();
    }
  }

  static int in_status(int code, const MPI_Status* statuses) {
    int kind = MPI_SUCCESS;
    MPI_Error_class(code, &kind);
    if (kind != MPI_ERR_IN_STATUS) return code;
    for (int i = 0; i < 2; ++i) {
      const int error = statuses[i].MPI_ERROR;
      if (error != MPI_SUCCESS && error != MPI_ERR_PENDING) return error;
    }
    return code;
  }

  // The reduce-scatter half of a ring: p-1 steps; in each, this rank sends one block's partial result to the right
  // and adds the left's to its own input for that block. `mine[b]` is this rank's input for block b (`counts[b]`
  // elements), only read; `keep(step, b)` is where the partial result of block b received at `step` is kept (the
  // last step's block is this rank's own: its result). Kept in `mine[b]` itself (all_reduce, or reduce_scatter's
  // output that is its block of the input), a segment is received into scratch and added there; kept elsewhere, it
  // is received there and this rank's input is added to it. Messages are cut into segments of `segment_` bytes,
  // the next one in flight while the last is added (still in cache). `memory` owns every buffer named here.
  template <class Keep>
  void reduce(const std::vector<const char*>& mine, const std::vector<int64_t>& counts, int item, Keep keep,
              MPI_Datatype type, MPI_Op op, const char* name, Tensors memory) {
    const int64_t per_segment = std::max<int64_t>(1, segment_ / item);
    if (halves_.numel() < 2 * per_segment * item) halves_ = at::empty({2 * per_segment * item}, at::kByte);
    char* const half[2] = {static_cast<char*>(halves_.data_ptr()),
                           static_cast<char*>(halves_.data_ptr()) + per_segment * item};
    memory.push_back(halves_);
    try {
      Posted posted(std::move(memory), patience_);
      steps(mine, counts, item, keep, type, op, name, half, posted);
    } catch (...) {
      halves_ = at::Tensor();  // a request abandoned there may still write into it: the next ring takes fresh scratch
      throw;
    }
  }

  // The ring's p-1 steps (`reduce`'s), their requests in `posted`.
  template <class Keep>
  void steps(const std::vector<const char*>& mine, const std::vector<int64_t>& counts, int item, Keep keep,
             MPI_Datatype type, MPI_Op op, const char* name, char* const half[2], Posted& posted) {
    const int p = size_, r = rank_, right = (r + 1) % p, left = (r + p - 1) % p;
    const int64_t per_segment = std::max<int64_t>(1, segment_ / item);
    for (int step = 0; step < p - 1; ++step) {
      const int sent = (r + p - 1 - step) % p, received = (r + 2 * p - 2 - step) % p;
      const char* from = step == 0 ? mine[sent] : keep(step - 1, sent);
      char* into = keep(step, received);
      const bool in_place = into == mine[received];
      const int64_t segments = (std::max(counts[sent], counts[received]) + per_segment - 1) / per_segment;
      auto length = [&](int64_t total, int64_t k) {  // elements of segment k of a block of `total`
        return std::clamp<int64_t>(total - k * per_segment, 0, per_segment);
      };
      auto post = [&](int64_t k) {
        const int64_t at = k * per_segment * item, got = length(counts[received], k), put = length(counts[sent], k);
        MPI_Request* pair = posted.pair(k);
        int code = MPI_SUCCESS;
        if (got) {
          code = MPI_Irecv(in_place ? half[k % 2] : into + at, static_cast<int>(got * item), MPI_BYTE, left, tag_,
                           comm_, &pair[0]);
        }
        if (code == MPI_SUCCESS && put) {
          code = MPI_Isend(from + at, static_cast<int>(put * item), MPI_BYTE, right, tag_, comm_, &pair[1]);
        }
        check_(code, name);
      };
      if (segments) post(0);
      for (int64_t k = 0; k < segments; ++k) {
        if (k + 1 < segments) post(k + 1);
        check_(wait_all(posted.pair(k)), name);
        const int64_t at = k * per_segment * item, got = length(counts[received], k);
        if (!got) continue;
        const void* add = in_place ? static_cast<const void*>(half[k % 2]) : mine[received] + at;
        check_(MPI_Reduce_local(add, into + at, static_cast<int>(got), type, op), name);
      }
    }
  }

  MPI_Comm comm_;
  int rank_, size_, tag_;
  int64_t segment_;  // bytes per message
  ms patience_;      // how long an error's requests may take to complete before they are abandoned
  bool survivors_;   // ULFM: a wait also looks whether the communicator was revoked or a member failed
  Check check_;
  static constexpr int64_t kLookNs = 10000000;  // 10 ms between those looks (MPIX_Comm_get_failed makes a group)
  at::Tensor halves_;  // the two receive segments, kept between calls: fresh pages cost page faults
};

}  // namespace hpcdist_native
