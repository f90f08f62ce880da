"""The tier's verdict on made-up logs: a suppression never hides a race of the backend's own code, only one with an
access in the library it names; a missing log fails the run."""

from __future__ import annotations

from pathlib import Path

from reports import check, parse, suppressions

GLOO = """==================
WARNING: ThreadSanitizer: data race (pid=7)
  Write of size 8 at 0x7b44 by main thread:
    #0 pthread_cond_destroy tsan_interceptors_posix.cpp:1283 (libtsan.so+0x4c98f)
    #1 <null> <null> (libtorch_cpu.so+0x66fee4f)

  Previous read of size 8 at 0x7b44 by thread T7:
    #0 pthread_cond_broadcast tsan_interceptors_posix.cpp:1276 (libtsan.so+0x480bc)
    #1 <null> <null> (libtorch_cpu.so+0x66ff063)

SUMMARY: ThreadSanitizer: data race (/venv/torch/lib/libtorch_cpu.so+0x66fee4f)
==================
"""
BACKEND = """==================
WARNING: ThreadSanitizer: data race (pid=7)
  Write of size 8 at 0x7b4{n} by main thread:
    #0 work() /src/hpcdist/mpi_backend/csrc/native.cpp:339 (hpcdist_native_tsan_0123.so+0x3bad5)
    #1 <null> <null> (libtorch_cpu.so+0x66c32ed)

  Previous write of size 8 at 0x7b4{n} by thread T1{n}:
    #0 settle() /src/hpcdist/mpi_backend/csrc/native.cpp:377 (hpcdist_native_tsan_0123.so+0x46f2b)

SUMMARY: ThreadSanitizer: data race /src/hpcdist/mpi_backend/csrc/native.cpp:339 in work()
==================
"""


def test_a_suppression_takes_out_another_library_s_report_never_one_with_a_backend_frame(tmp_path: Path) -> None:
    (tmp_path / "tsan.7").write_text(
        "***** Running under ThreadSanitizer v2 (pid 7) *****\n" + GLOO + BACKEND.format(n=1)
    )
    (tmp_path / "tsan.8").write_text(BACKEND.format(n=2))
    assert [r.kind for r in parse((tmp_path / "tsan.7").read_text(), tmp_path / "tsan.7")] == [
        "ThreadSanitizer: data race", "ThreadSanitizer: data race"]  # fmt: skip
    library = tmp_path / "absent.so"  # every backend frame here is symbolised: addr2line is not needed
    problems, notes = check(tmp_path, 2, library, [("race", "libtorch_cpu.so")])
    assert notes == ["suppressed 1 x race:libtorch_cpu.so"]
    assert problems == [
        "2 x ThreadSanitizer: data race; in the backend: Write of size 8 at 0x7b41 by main thread: "
        "work() native.cpp:339; Previous write of size 8 at 0x7b41 by thread T11: settle() native.cpp:377 "
        "(first in tsan.7)"
    ]
    problems, _ = check(tmp_path, 2, library, [])
    assert problems[1].startswith("1 x ThreadSanitizer: data race; no backend frame")


MPI_WROTE = """==================
WARNING: ThreadSanitizer: data race (pid=9)
  Write of size 8 at 0x7b48 by main thread:
    #0 operator delete(void*, unsigned long) tsan_new_delete.cpp:150 (libtsan.so.2.0.0+0x86c3d)
    #1 gather() /src/hpcdist/mpi_backend/csrc/native.cpp:247 (hpcdist_native_tsan_0123.so+0x3bad5)

  Previous write of size 8 at 0x7b48 by thread T2:
    #0 memcpy sanitizer_common_interceptors.inc:827 (libtsan.so.2.0.0+0x5dda6)
    #1 opal_generic_simple_unpack <null> (libopen-pal.so.80+0x71a2c)

SUMMARY: ThreadSanitizer: data race tsan_new_delete.cpp:150 in operator delete(void*, unsigned long)
==================
WARNING: ThreadSanitizer: data race (pid=9)
  Write of size 8 at 0x7bb0 by thread T10:
    #0 free tsan_interceptors_posix.cpp:706 (libtsan.so.2.0.0+0x47e82)
    #1 free ../include/rtld-malloc.h:50 (ld-linux-x86-64.so.2+0x11785)

  Previous write of size 8 at 0x7bb0 by thread T11:
    [failed to restore the stack]

  Thread T11 (tid=30105, finished) created by main thread at:
    #0 pthread_create tsan_interceptors_posix.cpp:1001 (libtsan.so.2.0.0+0x5e686)
    #1 race() /src/hpcdist/mpi_backend/csrc/testing.h:83 (hpcdist_native_tsan_0123.so+0xba230)

SUMMARY: ThreadSanitizer: data race ../include/rtld-malloc.h:50 in free
==================
"""


def test_a_race_with_an_access_in_a_named_library_goes_whatever_backend_frames_beside_it(tmp_path: Path) -> None:
    # the backend frees a buffer MPI's datatype code wrote on another thread before the call returned (an ordering
    # made inside MPI), and glibc's loader frees a finished thread's storage (a thread the backend started)
    (tmp_path / "tsan.9").write_text(MPI_WROTE)
    supp = [("race", "libopen-pal.so"), ("race", "ld-linux-x86-64.so.2")]
    assert check(tmp_path, 1, tmp_path / "absent.so", supp) == (
        [],
        ["suppressed 1 x race:ld-linux-x86-64.so.2", "suppressed 1 x race:libopen-pal.so"],
    )
    problems, _ = check(tmp_path, 1, tmp_path / "absent.so", [])
    assert len(problems) == 2


def test_fewer_logs_than_processes_fail_the_run(tmp_path: Path) -> None:
    (tmp_path / "asan.7").write_text("==7==AddressSanitizer: libc interceptors initialized\n")
    assert check(tmp_path, 1, tmp_path / "x.so", []) == ([], [])
    problems, _ = check(tmp_path, 2, tmp_path / "x.so", [])
    assert problems[0].startswith(f"1 sanitizer log(s) in {tmp_path} for 2 processes")


def test_the_suppressions_file_names_a_library_in_each_entry_and_never_the_backend() -> None:
    entries = suppressions(Path(__file__).with_name("tsan.supp"))
    assert entries and all(".so" in pattern for _, pattern in entries)  # a library, by its file
    assert not [pattern for _, pattern in entries if "hpcdist" in pattern]
