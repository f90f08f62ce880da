// The ledger: the last calls of every group of this process, for hang forensics, read by Python while the ranks'
// threads write them. Each slot is a seqlock: a writer claims it by its call number (an odd stamp while it writes,
// even once written), every field is an atomic written and read relaxed between the stamp's release and acquire,
// and a reader keeps a copy only if the stamp was the same even value before and after it read.
#pragma once

#include <torch/csrc/autograd/graph_task.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common.h"

namespace hpcdist_native {

constexpr size_t kLedgerCalls = 256;  // calls kept unless the trace asks for more (set_ledger)
constexpr int kDims = 4;  // the shape's first dimensions kept (the rest are rare; the count says how many)
constexpr uint64_t kUnrecorded = UINT64_MAX;
constexpr int kReadTries = 4;  // a reader's tries at a slot a writer is in, yielding between them

struct Call {
  std::atomic<uint64_t> stamp{0};  // 2 * (call number) + 1 while written, + 2 once written; 0: never written
  std::atomic<const char*> op{""};
  std::atomic<const char*> dtype{""};  // static names (c10's), as `op`
  std::atomic<int> group{0};           // index into the group names
  std::atomic<int> peer{-1};           // the root, or -1
  std::atomic<int> ndim{0};
  std::array<std::atomic<int64_t>, kDims> shape{};
  std::atomic<uint64_t> gseq{0};
  std::atomic<bool> backward{false};  // issued while autograd ran a backward pass on this thread (DDP's all-reduce)
  std::atomic<int64_t> start_ns{0};
  std::atomic<int64_t> end_ns{0};  // 0: in flight
};

// A slot's fields as one reader copied them.
struct CallCopy {
  const char* op;
  const char* dtype;
  int group, peer, ndim;
  std::array<int64_t, kDims> shape;
  uint64_t gseq;
  bool backward;
  int64_t start_ns, end_ns;
};

class Ledger {
 public:
  // Record a call as it is issued; its number, to mark it finished. A slot a writer is in, or that a newer call
  // took (the ring wrapped while this one was written), is left to it: this call goes unrecorded.
  uint64_t record(const char* op, const at::Tensor* t, int group, int peer, uint64_t gseq) {
    if (!recording_.load(std::memory_order_relaxed)) return kUnrecorded;
    const uint64_t id = next_.fetch_add(1, std::memory_order_relaxed);
    Call& c = slot(id);
    uint64_t seen = c.stamp.load(std::memory_order_relaxed);
    do {
      if (seen % 2 == 1 || seen > 2 * id) return kUnrecorded;
    } while (!c.stamp.compare_exchange_weak(seen, 2 * id + 1, std::memory_order_relaxed));
    std::atomic_thread_fence(std::memory_order_release);  // the odd stamp before any field (readers' recheck)
    constexpr auto relaxed = std::memory_order_relaxed;
    c.op.store(op, relaxed);
    c.group.store(group, relaxed);
    c.peer.store(peer, relaxed);
    c.gseq.store(gseq, relaxed);
    c.dtype.store(t ? c10::toString(t->scalar_type()) : "", relaxed);
    const int ndim = t ? static_cast<int>(t->dim()) : 0;
    c.ndim.store(ndim, relaxed);
    for (int i = 0; i < ndim && i < kDims; ++i) c.shape[i].store(t->size(i), relaxed);
    c.backward.store(torch::autograd::get_current_graph_task_id() != -1, relaxed);
    c.end_ns.store(0, relaxed);
    c.start_ns.store(now_ns(), relaxed);
    c.stamp.store(2 * id + 2, std::memory_order_release);
    return id;
  }

  // Mark call `id` finished: only while its slot still holds it (a newer call may have taken the slot since).
  void finished(uint64_t id) {
    if (id == kUnrecorded) return;
    Call& c = slot(id);
    uint64_t mine = 2 * id + 2;
    if (!c.stamp.compare_exchange_strong(mine, 2 * id + 1, std::memory_order_relaxed)) return;
    std::atomic_thread_fence(std::memory_order_release);
    c.end_ns.store(now_ns(), std::memory_order_relaxed);
    c.stamp.store(2 * id + 2, std::memory_order_release);
  }

  // Copy call `id`'s fields into `out` if its slot holds it, whole (never a row torn by a writer).
  bool read(uint64_t id, CallCopy& out) const {
    const Call& c = slot(id);
    constexpr auto relaxed = std::memory_order_relaxed;
    for (int attempt = 0; attempt < kReadTries; ++attempt) {
      const uint64_t before = c.stamp.load(std::memory_order_acquire);
      if (before != 2 * id + 2) {
        if (before != 2 * id + 1) return false;  // another call's slot now
        std::this_thread::yield();  // its writer is in it: marking it finished, or still recording it
        continue;
      }
      out.op = c.op.load(relaxed);
      out.dtype = c.dtype.load(relaxed);
      out.group = c.group.load(relaxed);
      out.peer = c.peer.load(relaxed);
      out.ndim = c.ndim.load(relaxed);
      for (int i = 0; i < kDims; ++i) out.shape[i] = c.shape[i].load(relaxed);
      out.gseq = c.gseq.load(relaxed);
      out.backward = c.backward.load(relaxed);
      out.start_ns = c.start_ns.load(relaxed);
      out.end_ns = c.end_ns.load(relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);  // every field read before the stamp's recheck
      if (c.stamp.load(relaxed) == before) return true;
    }
    return false;
  }

  // The calls still in the ring, oldest first.
  std::vector<CallCopy> copies() const {
    std::vector<CallCopy> out;
    const uint64_t next = next_.load(std::memory_order_acquire);
    const uint64_t size = ring_.load(std::memory_order_acquire)->size;
    CallCopy copy{};
    for (uint64_t id = next > size ? next - size : 0; id < next; ++id) {
      if (read(id, copy)) out.push_back(copy);
    }
    return out;
  }

  // The start (monotonic seconds) of the oldest call still in flight, or 0: what the forensics' watchdog polls.
  double oldest_pending() const {
    const uint64_t next = next_.load(std::memory_order_acquire);
    const uint64_t size = ring_.load(std::memory_order_acquire)->size;
    CallCopy copy{};
    for (uint64_t id = next > size ? next - size : 0; id < next; ++id) {
      if (read(id, copy) && copy.end_ns == 0) return copy.start_ns / 1e9;
    }
    return 0;
  }

  // Record calls (or not), keeping the last `size`: a different size takes a fresh ring, which the trace asks for
  // while no call is in flight; the old ring is kept (a writer may still hold it) and its calls not carried over.
  void set(bool on, size_t size) {
    if (size && size != ring_.load()->size) {
      std::lock_guard<std::mutex> lock(names_mutex_);
      rings_.emplace_back(new Ring(size));
      ring_.store(rings_.back().get());
    }
    recording_.store(on);
  }

  int name_group(const std::string& name) {
    std::lock_guard<std::mutex> lock(names_mutex_);
    names_.push_back(name);
    return static_cast<int>(names_.size() - 1);
  }

  std::vector<std::string> group_names() const {
    std::lock_guard<std::mutex> lock(names_mutex_);
    return names_;
  }

 private:
  struct Ring {
    explicit Ring(size_t n) : size(n), calls(new Call[n]) {}
    const size_t size;
    std::unique_ptr<Call[]> calls;
  };

  Call& slot(uint64_t id) const {
    Ring* r = ring_.load(std::memory_order_acquire);
    return r->calls[id % r->size];
  }

  std::vector<std::unique_ptr<Ring>> rings_ = [] {
    std::vector<std::unique_ptr<Ring>> rings;
    rings.emplace_back(new Ring(kLedgerCalls));
    return rings;
  }();
  std::atomic<Ring*> ring_{rings_.back().get()};
  std::atomic<bool> recording_{false};  // set_ledger: hang forensics are on
  std::atomic<uint64_t> next_{0};
  mutable std::mutex names_mutex_;
  std::vector<std::string> names_;  // every group's name, e.g. "world" or "[0, 1]"; only appended to
};

// This process's ledger: one for all its groups (and never destroyed: threads may record while Python exits).
inline Ledger& ledger() {
  static Ledger* one = new Ledger();
  return *one;
}

// Marks a call finished when it goes out of scope, however the call ended: one that raised is over too, and a hang
// report must not show its rank still waiting in it.
struct Finishing {
  const uint64_t call;
  explicit Finishing(uint64_t id) : call(id) {}
  Finishing(const Finishing&) = delete;
  Finishing& operator=(const Finishing&) = delete;
  ~Finishing() { ledger().finished(call); }
};

}  // namespace hpcdist_native
