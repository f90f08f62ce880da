// hpcdist's compiled mpi backend: a c10d::Backend whose hot collectives call MPI from C++.
//
// Synchronous calls run on the caller's thread: MPI's blocking collectives (the MPI's tuned algorithms), or for
// reduce_scatter and large all_reduces a ring of point-to-point messages (`ring_reduce`);
// asynchronous ones run on one worker thread per group and settle a Work and its Future. Every call runs on
// the group's one communicator in the order it was issued (a call waits until the worker has run the ones
// before it): torch may issue the same collective synchronously on one rank and asynchronously on another
// (DDP's join does), and MPI matches collectives on a communicator by their order only. Every other call form
// (p2p, gather/scatter/alltoall, several tensors, reduced precision, AVG, accelerator tensors, coalescing) goes
// to the Python group it was made with, which stays the reference implementation. Where ranks share cores, each
// call is its non-blocking twin, waited on with sched_yield (`call`). A blocking call cannot time out in MPI:
// `overdue()` names the calls past their group's timeout, and the Python watchdog (native.py) ends the job
// with that text, as NCCL's watchdog does. Every call also goes into the ledger (ledger.h), written
// without Python objects, that hang forensics read as hpcdist.commcall.Call objects (`ledger()`).
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/version.h>

#include <pybind11/chrono.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "common.h"
#include "ledger.h"
#include "ring.h"
#include "work.h"

// One collective as `call` runs it (NativeBackend::call): MPI_<blocking>(args) or MPI_<nonblocking>(args, &request).
#define COLLECTIVE(blocking, nonblocking, ...)      \
  call([&] { return MPI_##blocking(__VA_ARGS__); }, \
       [&](MPI_Request* request) { return MPI_##nonblocking(__VA_ARGS__, request); })

namespace hpcdist_testing {
struct Access;
}

namespace hpcdist_native {

// The call a thread of this group is in, for the watchdog: its name and deadline (0: none).
struct InFlight {
  std::atomic<int64_t> deadline{0};
  std::atomic<const char*> name{""};
  std::atomic<int64_t> limit_ms{0};
};

class Watched {
 public:
  Watched(InFlight& slot, const char* name, ms limit) : slot_(slot) {  // the watchdog reads the deadline first
    slot_.name.store(name, std::memory_order_relaxed);
    slot_.limit_ms.store(limit.count(), std::memory_order_relaxed);
    slot_.deadline.store(now_ns() + limit.count() * 1000000, std::memory_order_release);
  }
  ~Watched() { slot_.deadline.store(0, std::memory_order_release); }

 private:
  InFlight& slot_;
};

// A group's asynchronous operations and the thread that runs them in order. Shared by the backend and the thread,
// so that the backend may be destroyed on the thread itself (a future's callback dropping its last reference).
struct Worker {
  using Op = std::function<void(MPI_Comm)>;
  struct Job {
    Op op;
    MPI_Comm comm;
    c10::intrusive_ptr<QueuedWork> work;
    const char* name;
    ms limit;
    uint64_t call;  // its number in the ledger
  };

  // Run the jobs handed over until told to stop with none left.
  static void run(const std::shared_ptr<Worker>& self) {
    Worker& w = *self;
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(w.mutex);
        w.queued.wait(lock, [&] { return w.stopping || !w.queue.empty(); });
        if (w.queue.empty()) return;
        job = std::move(w.queue.front());
        w.queue.pop_front();
      }
      std::exception_ptr error;
      try {
        Watched watch(w.slot, job.name, job.limit);
        job.op(job.comm);
      } catch (...) {
        error = std::current_exception();
      }
      ledger().finished(job.call);
      job.work->settle(error);  // runs the future's callbacks here; they may issue more (run in place), or drop
      {                         // the backend's last reference: from here only `w` is used
        std::lock_guard<std::mutex> lock(w.mutex);
        w.retired.push_back(std::move(job));
        --w.pending;
      }
      w.idle.notify_all();
    }
  }

  std::mutex mutex;
  std::condition_variable queued, idle;
  std::deque<Job> queue;
  // Jobs run, released by a thread that issues calls (NativeBackend::collect), never by this one: their Work and
  // tensors are also torch's, whose references drop in its own libraries, in code ThreadSanitizer cannot see.
  std::vector<Job> retired;
  std::atomic<int> pending{0};
  bool stopping = false;
  InFlight slot;  // what the thread is in, for the watchdog
  std::atomic<std::thread::id> id{};
};

class NativeBackend;
std::mutex live_mutex;
std::set<NativeBackend*> live;  // every group of this process, for overdue()

// What the Python side decides for a group (hpcdist/mpi_backend/__init__.py passes each by name).
struct Spec {
  std::string backend_name;  // as torch registered the backend
  std::string who, desc;     // this rank and the group, as errors name them
  std::string name;          // the group as the ledger names it
  std::vector<int> ranks;    // the global rank of each group rank
  ms timeout;
  int64_t ring_bytes;    // the size from which all_reduce takes the ring
  int ring_tag;          // the rings' tag on the ring communicator, apart from the Python group's rings' tags
  int64_t ring_segment;  // the rings' message size in bytes
  bool yielding;         // ranks share cores somewhere in the group: wait on non-blocking calls, yielding the CPU
  bool survivors;        // --on-failure shrink (ULFM): a ring's wait ends once a member failed (Ring)
};

// How long the requests an error left in a ring may take to complete before they are abandoned (Posted).
constexpr ms kRingPatience{5000};

class NativeBackend : public c10d::Backend {
  friend struct hpcdist_testing::Access;

 public:
  NativeBackend(uint64_t comm, int rank, int size, Spec spec, py::object fallback)
      : Backend(rank, size),
        spec_(std::move(spec)),
        comm_(comm_of(comm)),
        timeout_(spec_.timeout.count()),
        py_(std::move(fallback)),
        ring_comm_(comm_of(py_.attr("_ring_comm").attr("handle").cast<uint64_t>())),
        ring_(ring_comm_, rank, size, spec_.ring_tag, spec_.ring_segment, kRingPatience, spec_.survivors,
              [this](int code, const char* name) { check(code, name); }),
        group_(ledger().name_group(spec_.name)) {
    std::lock_guard<std::mutex> lock(live_mutex);
    live.insert(this);
  }

  ~NativeBackend() override {
    {
      std::lock_guard<std::mutex> lock(live_mutex);
      live.erase(this);
    }
    stop();
    release(py_);
  }

  const std::string getBackendName() const override { return spec_.backend_name; }
  bool supportsCoalescing() const override { return true; }
  bool supportsShrinking() const override { return true; }

  // torch's shrink_group: the Python group makes the backend of the ranks kept (shrinking.py) and abandons itself.
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
                                           const c10::intrusive_ptr<Options>& /*opts_override*/) override {
    py::gil_scoped_acquire gil;
    return py_.attr("shrink")(ranks_to_exclude, shrink_flags).cast<c10::intrusive_ptr<c10d::Backend>>();
  }

  // The text of each call of this group past its deadline (the watchdog ends the job with it).
  void overdue(std::vector<std::string>& out) const {
    const int64_t now = now_ns();
    for (const InFlight* slot : std::array<const InFlight*, 2>{&caller_, &worker_->slot}) {
      const int64_t deadline = slot->deadline.load(std::memory_order_acquire);
      if (deadline != 0 && now > deadline) {
        out.push_back(spec_.who + ": " + slot->name.load() + " on " + spec_.desc + " did not complete within " +
                      seconds(slot->limit_ms.load()) +
                      " s (the group's timeout): check that every rank of the group made this call (with hang "
                      "forensics on, HPCDIST_TIMEOUT's report names a rank that is elsewhere or stuck); only if the "
                      "call is just that slow, pass a larger timeout. MPI cannot cancel a blocking call, so the job "
                      "ends");
      }
    }
  }

  // -- collectives -------------------------------------------------------------------------------------------
  WorkPtr allreduce(Tensors& ts, const c10d::AllreduceOptions& opts) override {
    if (coalescing_ || ts.size() != 1 || !reducible(ts[0], opts.reduceOp)) {
      return fallback("allreduce", ts, opts);
    }
    MPI_Datatype type = mpi_type(ts[0].scalar_type());
    MPI_Op op = mpi_op(opts.reduceOp, ts[0].scalar_type());
    const bool round = ring(ts[0]);
    return issue("all_reduce", ts, opts.asyncOp, opts.timeout, -1, [=, t = ts[0]](MPI_Comm comm) {
      Staged s(t);
      if (round) {
        ring_.all_reduce(s.buf, type, op, "all_reduce");
      } else {
        check(COLLECTIVE(Allreduce, Iallreduce, MPI_IN_PLACE, s.data(), s.count(), type, op, comm), "all_reduce");
      }
      s.done();
    });
  }

  WorkPtr broadcast(Tensors& ts, const c10d::BroadcastOptions& opts) override {
    if (coalescing_ || ts.size() != 1 || !dense_cpu(ts[0]) || !root_ok(opts.rootRank)) {
      return fallback("broadcast", ts, opts);
    }
    const int root = static_cast<int>(opts.rootRank);
    return issue("broadcast", ts, opts.asyncOp, opts.timeout, root, [=, t = ts[0]](MPI_Comm comm) {
      Staged s(t);
      check(COLLECTIVE(Bcast, Ibcast, s.data(), s.bytes(), MPI_BYTE, root, comm), "broadcast");
      s.done();
    });
  }

  WorkPtr reduce(Tensors& ts, const c10d::ReduceOptions& opts) override {
    if (coalescing_ || ts.size() != 1 || !reducible(ts[0], opts.reduceOp) || !root_ok(opts.rootRank)) {
      return fallback("reduce", ts, opts);
    }
    MPI_Datatype type = mpi_type(ts[0].scalar_type());
    MPI_Op op = mpi_op(opts.reduceOp, ts[0].scalar_type());
    const int root = static_cast<int>(opts.rootRank);
    const bool mine = root == rank_;
    return issue("reduce", ts, opts.asyncOp, opts.timeout, root, [=, t = ts[0]](MPI_Comm comm) {
      Staged s(t);
      const void* send = mine ? MPI_IN_PLACE : s.data();
      check(COLLECTIVE(Reduce, Ireduce, send, s.data(), s.count(), type, op, root, comm), "reduce");
      if (mine) s.done();
    });
  }

  WorkPtr allgather(std::vector<Tensors>& outs, Tensors& ins, const c10d::AllgatherOptions& opts) override {
    if (coalescing_ || ins.size() != 1 || outs.size() != 1 || outs[0].size() != static_cast<size_t>(size_) ||
        !same_shape(outs[0], ins[0]) || !fits(ins[0], size_)) {
      return fallback("allgather", outs, ins, opts);
    }
    auto gather = [=, in = ins[0], out = outs[0]](MPI_Comm comm) {
      at::Tensor src = plain(in);
      const int64_t count = src.numel();
      at::Tensor flat = at::empty({static_cast<int64_t>(out.size()) * count}, src.options());
      const int n = static_cast<int>(src.nbytes());
      check(COLLECTIVE(Allgather, Iallgather, src.data_ptr(), n, MPI_BYTE, flat.data_ptr(), n, MPI_BYTE, comm),
            "all_gather");
      for (size_t i = 0; i < out.size(); ++i) out[i].copy_(flat.narrow(0, i * count, count).view(out[i].sizes()));
    };
    return issue("all_gather", outs[0], opts.asyncOp, opts.timeout, -1, gather, &ins);
  }

  WorkPtr _allgather_base(at::Tensor& out, at::Tensor& in, const c10d::AllgatherOptions& opts) override {
    if (coalescing_ || !dense_cpu(in) || !dense_cpu(out) || in.scalar_type() != out.scalar_type() ||
        out.numel() != in.numel() * size_) {
      return fallback("_allgather_base", out, in, opts);
    }
    Tensors result{out};
    Tensors input{in};
    return issue("all_gather_into_tensor", result, opts.asyncOp, opts.timeout, -1, [=](MPI_Comm comm) {
      Staged dst(out);
      const int n = static_cast<int>(in.nbytes());
      char* slot = static_cast<char*>(dst.data()) + static_cast<int64_t>(rank_) * n;
      const bool in_place = in.is_contiguous() && in.data_ptr() == slot;
      at::Tensor src = in_place ? in : plain(in);
      if (!in_place && overlaps(src, dst.buf)) src = src.clone();
      const void* send = in_place ? MPI_IN_PLACE : src.data_ptr();
      check(COLLECTIVE(Allgather, Iallgather, send, n, MPI_BYTE, dst.data(), n, MPI_BYTE, comm),
            "all_gather_into_tensor");
      dst.done();
    }, &input);
  }

  WorkPtr reduce_scatter(Tensors& outs, std::vector<Tensors>& ins, const c10d::ReduceScatterOptions& opts) override {
    if (coalescing_ || outs.size() != 1 || ins.size() != 1 || ins[0].size() != static_cast<size_t>(size_) ||
        !reducible(outs[0], opts.reduceOp) || !same_shape(ins[0], outs[0]) || !fits(outs[0], size_)) {
      return fallback("reduce_scatter", outs, ins, opts);
    }
    MPI_Datatype type = mpi_type(outs[0].scalar_type());
    MPI_Op op = mpi_op(opts.reduceOp, outs[0].scalar_type());
    auto scatter = [=, out = outs[0], in = ins[0]](MPI_Comm comm) {
      std::vector<at::Tensor> blocks;
      for (const auto& t : in) blocks.push_back(plain(t));
      Staged dst(out);
      bool aliased = false;
      for (const auto& b : blocks) aliased = aliased || overlaps(b, dst.buf);
      if (!aliased && scatter_ring()) {
        std::vector<const char*> from;
        for (const auto& b : blocks) from.push_back(static_cast<const char*>(b.data_ptr()));
        ring_.reduce_scatter(from, blocks, dst.buf, type, op, "reduce_scatter");
      } else {
        at::Tensor src = at::cat(blocks).reshape({-1});
        check(COLLECTIVE(Reduce_scatter_block, Ireduce_scatter_block, src.data_ptr(), dst.data(), dst.count(), type,
                         op, comm),
              "reduce_scatter");
      }
      dst.done();
    };
    return issue("reduce_scatter", outs, opts.asyncOp, opts.timeout, -1, scatter);
  }

  WorkPtr _reduce_scatter_base(at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& opts) override {
    if (coalescing_ || !reducible(out, opts.reduceOp) || !dense_cpu(in) || in.scalar_type() != out.scalar_type() ||
        in.numel() != out.numel() * size_) {
      return fallback("_reduce_scatter_base", out, in, opts);
    }
    MPI_Datatype type = mpi_type(out.scalar_type());
    MPI_Op op = mpi_op(opts.reduceOp, out.scalar_type());
    Tensors result{out};
    return issue("reduce_scatter_tensor", result, opts.asyncOp, opts.timeout, -1, [=](MPI_Comm comm) {
      at::Tensor src = plain(in);
      Staged dst(out);
      const char* base = static_cast<const char*>(src.data_ptr());
      const int64_t block = static_cast<int64_t>(dst.buf.nbytes());
      // torch's in-place form: the output is this rank's block of the input, which the ring allows (MPI does not)
      const bool own_block = dst.data() == base + rank_ * block;
      if ((own_block || !overlaps(src, dst.buf)) && scatter_ring()) {
        std::vector<const char*> from;
        for (int i = 0; i < size_; ++i) from.push_back(base + i * block);
        ring_.reduce_scatter(from, {src}, dst.buf, type, op, "reduce_scatter_tensor");
      } else {
        if (overlaps(src, dst.buf)) src = src.clone();
        check(COLLECTIVE(Reduce_scatter_block, Ireduce_scatter_block, src.data_ptr(), dst.data(), dst.count(), type,
                         op, comm),
              "reduce_scatter_tensor");
      }
      dst.done();
    });
  }

  WorkPtr barrier(const c10d::BarrierOptions& opts) override {
    if (coalescing_) return fallback("barrier", opts);
    Tensors none;
    return issue("barrier", none, opts.asyncOp, opts.timeout, -1,
                 [this](MPI_Comm comm) { check(COLLECTIVE(Barrier, Ibarrier, comm), "barrier"); });
  }

  // -- the Python group's: every other call form -------------------------------------------------------------
  WorkPtr allreduce_coalesced(Tensors& ts, const c10d::AllreduceCoalescedOptions& opts) override {
    return fallback("allreduce_coalesced", ts, opts);
  }
  WorkPtr allgather_coalesced(std::vector<Tensors>& outs, Tensors& ins, const c10d::AllgatherOptions& opts) override {
    return fallback("allgather_coalesced", outs, ins, opts);
  }
  WorkPtr allgather_into_tensor_coalesced(Tensors& outs, Tensors& ins, const c10d::AllgatherOptions& opts) override {
    return fallback("allgather_into_tensor_coalesced", outs, ins, opts);
  }
  WorkPtr reduce_scatter_tensor_coalesced(Tensors& outs, Tensors& ins,
                                          const c10d::ReduceScatterOptions& opts) override {
    return fallback("reduce_scatter_tensor_coalesced", outs, ins, opts);
  }
  WorkPtr gather(std::vector<Tensors>& outs, Tensors& ins, const c10d::GatherOptions& opts) override {
    return fallback("gather", outs, ins, opts);
  }
  WorkPtr scatter(Tensors& outs, std::vector<Tensors>& ins, const c10d::ScatterOptions& opts) override {
    return fallback("scatter", outs, ins, opts);
  }
  WorkPtr alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                        std::vector<int64_t>& in_splits, const c10d::AllToAllOptions& opts) override {
    return fallback("alltoall_base", out, in, out_splits, in_splits, opts);
  }
  WorkPtr alltoall(Tensors& outs, Tensors& ins, const c10d::AllToAllOptions& opts) override {
    return fallback("alltoall", outs, ins, opts);
  }
  WorkPtr send(Tensors& ts, int dst, int tag) override { return fallback<false>("send", ts, dst, tag); }
  WorkPtr recv(Tensors& ts, int src, int tag) override { return fallback<false>("recv", ts, src, tag); }
  WorkPtr recvAnysource(Tensors& ts, int tag) override { return fallback<false>("recv_anysource", ts, tag); }

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    drain();
    py::gil_scoped_acquire gil;
    py_.attr("monitored_barrier")(opts, wait_all_ranks);
  }

  void startCoalescing() override {
    drain();
    coalescing_ = true;
    py::gil_scoped_acquire gil;
    py_.attr("start_coalescing")();
  }

  WorkPtr endCoalescing() override {
    coalescing_ = false;
    py::gil_scoped_acquire gil;
    return c10::make_intrusive<PyWork>(py_.attr("end_coalescing")());
  }

  void setTimeout(ms timeout) override {
    timeout_.store(timeout.count());
    py::gil_scoped_acquire gil;
    py_.attr("set_timeout")(timeout);
  }

  // The collectives issued on this group so far (point-to-point calls are not counted: ranks differ in those).
  void setSequenceNumberForGroup() override { seq_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return seq_; }

  void shutdown() override {
    stop();
    py::gil_scoped_acquire gil;
    py_.attr("shutdown")();
  }

  void abort() override {
    py::gil_scoped_acquire gil;
    py_.attr("abort")();
  }

 private:
  using Op = std::function<void(MPI_Comm)>;
  struct Job {
    Op op;
    c10::intrusive_ptr<QueuedWork> work;
    const char* name;
    ms limit;
    uint64_t call;  // its number in the ledger's ring
  };

  static bool same_shape(const Tensors& ts, const at::Tensor& like) {
    for (const auto& t : ts) {
      if (!dense_cpu(t) || t.scalar_type() != like.scalar_type() || t.numel() != like.numel()) return false;
    }
    return dense_cpu(like);
  }

  static bool fits(const at::Tensor& t, int size) {
    return t.nbytes() * static_cast<size_t>(size) <= static_cast<size_t>(INT_MAX);
  }

  static bool overlaps(const at::Tensor& a, const at::Tensor& b) {
    const char* pa = static_cast<const char*>(a.data_ptr());
    const char* pb = static_cast<const char*>(b.data_ptr());
    return a.nbytes() && b.nbytes() && pa < pb + b.nbytes() && pb < pa + a.nbytes();
  }

  bool reducible(const at::Tensor& t, const c10d::ReduceOp& op) const {
    return dense_cpu(t) && mpi_type(t.scalar_type()) != MPI_DATATYPE_NULL && mpi_op(op, t.scalar_type()) != MPI_OP_NULL;
  }

  bool root_ok(int64_t root) const { return 0 <= root && root < size_; }

  // A large all_reduce goes round the segmented ring (Ring::all_reduce): at 2 ranks it moves half the bytes of the
  // MPI's own algorithm and measured up to 2x faster from 32 MiB (docs/measurements/mpi-backend.md).
  bool ring(const at::Tensor& t) const { return size_ > 1 && static_cast<int64_t>(t.nbytes()) >= spec_.ring_bytes; }

  // A reduce_scatter goes round the ring (Ring::reduce_scatter) at every size: it reads the input where it lies, so
  // torch's in-place form (the output is this rank's block of the input) needs no copy, and it measured faster
  // than Open MPI's Reduce_scatter_block from 1 MiB at 2 ranks (docs/measurements/mpi-backend.md).
  bool scatter_ring() const { return size_ > 1; }

  // MPI's blocking call; or, where ranks share cores, its non-blocking twin waited on with sched_yield: a blocking
  // call busy-polls and starves the rank it waits for (raw Allreduce of 16 B took 5 ms at 4 ranks on 2 cores).
  // Every rank of the group decides alike (_create in __init__.py): MPI never matches a blocking call with a
  // non-blocking one.
  template <class Blocking, class Nonblocking>
  int call(Blocking blocking, Nonblocking nonblocking) const {
    if (!spec_.yielding) return blocking();
    MPI_Request request;
    int code = nonblocking(&request);
    for (int done = 0; code == MPI_SUCCESS && !done;) {
      code = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (code == MPI_SUCCESS && !done) sched_yield();
    }
    return code;
  }

  // Throw the group's error for a failed MPI call. After a process failure (ULFM) both communicators are revoked
  // first, so the peers still in the same call return too, and a ring's requests complete (Posted).
  void check(int code, const char* name) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    const std::string error(text, length);
    std::string said;
    if (lost_process(code)) {
      said = lost_ranks();
      revoke(comm_);
      revoke(ring_comm_);
    }
    C10_THROW_ERROR(DistBackendError, spec_.who + ": " + name + " on " + spec_.desc + " failed: " +
                                          (said.empty() ? error : said + " (" + error + ")"));
  }

  // After a process failure: which ranks were lost, as at the job's start.
  std::string lost_ranks() const {
#if defined(OMPI_HAVE_MPI_EXT_FTMPI) && defined(MPI_ERR_PROC_FAILED)
    MPI_Group failed, world;
    int count = 0;
    std::string ranks;
    if (MPIX_Comm_get_failed(comm_, &failed) == MPI_SUCCESS) {
      MPI_Group_size(failed, &count);
      std::vector<int> in(count), out(count);
      for (int i = 0; i < count; ++i) in[i] = i;
      MPI_Comm_group(MPI_COMM_WORLD, &world);
      MPI_Group_translate_ranks(failed, count, in.data(), world, out.data());
      for (int rank : out) ranks += (ranks.empty() ? "" : ",") + std::to_string(rank);
      MPI_Group_free(&world);
      MPI_Group_free(&failed);
    }
    if (count == 0) return "another rank revoked the communicator after ranks were lost";
    return (count == 1 ? "rank " + ranks + " was" : "ranks " + ranks + " were") + " lost (process failed)";
#else
    return "";
#endif
  }

  // The Python group records the call in the ledger itself, numbered among this group's collectives.
  template <bool Collective = true, class... A>
  WorkPtr fallback(const char* name, A&... args) {
    if (Collective) ++seq_;
    drain();
    py::gil_scoped_acquire gil;
    python_pending_.store(true);
    py_.attr("_gseq") = seq_.load() - (Collective ? 1 : 0);
    return c10::make_intrusive<PyWork>(py_.attr(name)(args...));
  }

  // The Python group's asynchronous calls: settled before each call here, as the Python group does before its
  // own, so an error nobody waited for is raised at the next call whichever implementation takes it.
  void settle_python() {
    if (!python_pending_.load()) return;
    py::gil_scoped_acquire gil;
    py_.attr("_check")();
    python_pending_.store(py::len(py_.attr("_outstanding")) + py::len(py_.attr("_orphans")) > 0);
  }

  ms limit_of(ms given) const { return given.count() > 0 ? given : ms(timeout_.load()); }

  // Run an operation now (synchronous) or hand it to the worker (asynchronous), recording it in the ledger.
  // `shown` holds the tensor the ledger shows, `root` the group rank of a rooted collective (else -1).
  template <class F>
  WorkPtr issue(const char* name, const Tensors& out, bool async, ms given, int root, F&& op,
                const Tensors* shown = nullptr) {
    settle_python();
    ++seq_;
    const ms limit = limit_of(given);
    const Tensors& seen = shown ? *shown : out;
    const int peer = root < 0 ? -1 : spec_.ranks.at(root);
    const uint64_t call = ledger().record(name, seen.empty() ? nullptr : &seen[0], group_, peer, seq_);
    if (std::this_thread::get_id() == worker_->id.load()) {  // a future's callback issued it: run it in place
      Finishing finishing{call};
      Watched watch(worker_->slot, name, limit);
      without_gil([&] { op(comm_); });
      return c10::make_intrusive<DoneWork>(out);
    }
    collect();
    if (!async) {
      drain();
      Finishing finishing{call};
      Watched watch(caller_, name, limit);
      without_gil([&] { op(comm_); });
      return c10::make_intrusive<DoneWork>(out);
    }
    auto work = c10::make_intrusive<QueuedWork>(out, spec_.who + ": " + name + " on " + spec_.desc);
    {
      std::lock_guard<std::mutex> lock(worker_->mutex);
      if (!worker_thread_.joinable()) start();
      worker_->queue.push_back(Worker::Job{Worker::Op(std::forward<F>(op)), comm_, work, name, limit, call});
      ++worker_->pending;
    }
    worker_->queued.notify_one();
    return work;
  }

  // Wait until the worker has run everything handed to it: operations run in the order they were issued.
  void drain() {
    if (worker_->pending.load() == 0 || std::this_thread::get_id() == worker_->id.load()) return;
    std::unique_lock<std::mutex> lock(worker_->mutex);
    without_gil([&] { worker_->idle.wait(lock, [&] { return worker_->pending.load() == 0; }); });
  }

  // Release the jobs the worker has run, here (Worker::retired).
  void collect() {
    std::vector<Worker::Job> done;
    std::lock_guard<std::mutex> lock(worker_->mutex);
    done.swap(worker_->retired);
  }

  void start() {
    worker_thread_ = std::thread(Worker::run, worker_);  // the thread holds the Worker as long as it runs
    worker_->id.store(worker_thread_.get_id());
  }

  // Stop the worker once it has run what it was given. On the worker itself (a future's callback there dropped
  // the backend's last reference) the thread is let go instead of joined: from there it uses the shared Worker
  // only, and what is still queued for it is settled with an error, since its operations need this backend.
  void stop() {
    const bool on_worker = std::this_thread::get_id() == worker_->id.load();
    std::deque<Worker::Job> orphans;
    {
      std::lock_guard<std::mutex> lock(worker_->mutex);
      worker_->stopping = true;
      if (on_worker) orphans.swap(worker_->queue);
    }
    worker_->queued.notify_all();
    if (worker_thread_.joinable()) {
      if (on_worker) {
        worker_thread_.detach();
      } else {
        without_gil([&] { worker_thread_.join(); });
      }
    }
    if (!on_worker) collect();
    for (Worker::Job& job : orphans) {
      job.work->settle(std::make_exception_ptr(std::runtime_error(
          spec_.who + ": " + job.name + " on " + spec_.desc + " never ran: the group was destroyed before it")));
      ledger().finished(job.call);
      --worker_->pending;
    }
  }

  Spec spec_;
  MPI_Comm comm_;
  std::atomic<int64_t> timeout_;  // milliseconds: setTimeout's, read by every call's thread
  py::object py_;
  MPI_Comm ring_comm_;  // the Python group's duplicate of comm_, for the rings' messages
  Ring ring_;
  std::atomic<bool> coalescing_{false};
  std::atomic<bool> python_pending_{false};  // the Python group may have calls in flight
  std::atomic<uint64_t> seq_{0};
  int group_;       // this group's name in the ledger
  InFlight caller_;  // what the caller's thread is in (the worker's is in worker_)
  std::shared_ptr<Worker> worker_ = std::make_shared<Worker>();
  std::thread worker_thread_;
};

// The process group torch gets: the backend for CPU and CUDA tensors, under its registered name (torch would say
// "custom", which DDP's logging and get_backend's users would see).
class NamedGroup : public c10d::ProcessGroup {
 public:
  NamedGroup(const c10::intrusive_ptr<NativeBackend>& backend, int rank, int size)
      : ProcessGroup(rank, size), name_(backend->getBackendName()) {
    setDefaultBackend(BackendType::CUSTOM);
    for (auto device : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) setBackend(device, BackendType::CUSTOM, backend);
  }
  const std::string getBackendName() const override { return name_; }
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 14  // torch 2.14 dropped it from ProcessGroup (a no-op since)
  void setSequenceNumberForGroup() override { getDefaultBackend()->setSequenceNumberForGroup(); }
#endif
  uint64_t getSequenceNumberForGroup() override { return getDefaultBackend()->getSequenceNumberForGroup(); }

 private:
  std::string name_;
};

std::vector<std::string> overdue() {
  std::vector<std::string> out;
  std::lock_guard<std::mutex> lock(live_mutex);
  for (const NativeBackend* backend : live) backend->overdue(out);
  return out;
}

c10::intrusive_ptr<c10d::ProcessGroup> make_group(uint64_t comm, int rank, int size, py::object fallback, Spec spec) {
  auto backend = c10::make_intrusive<NativeBackend>(comm, rank, size, std::move(spec), std::move(fallback));
  return c10::make_intrusive<NamedGroup>(backend, rank, size);
}

// The backend alone, as torch's shrink_group registers it on a process group of its own.
c10::intrusive_ptr<c10d::Backend> make_backend(uint64_t comm, int rank, int size, py::object fallback, Spec spec) {
  return c10::make_intrusive<NativeBackend>(comm, rank, size, std::move(spec), std::move(fallback));
}

// The ledger's calls, oldest first, each made by `call_type(**fields)` (hpcdist.commcall.Call): start and end in
// seconds of CLOCK_MONOTONIC (end None: in flight), the root as "root=N" (else ""), dtypes as c10 names them.
std::vector<py::object> ledger_calls(const py::object& call_type) {
  const std::vector<CallCopy> copies = ledger().copies();
  const std::vector<std::string> names = ledger().group_names();
  std::vector<py::object> out;
  for (const CallCopy& c : copies) {
    py::tuple shape(std::min(c.ndim, kDims));
    for (int i = 0; i < std::min(c.ndim, kDims); ++i) shape[i] = c.shape[i];
    const py::object end = c.end_ns ? py::object(py::float_(c.end_ns / 1e9)) : py::object(py::none());
    using namespace pybind11::literals;
    out.push_back(call_type("op"_a = c.op, "peer"_a = c.peer < 0 ? "" : "root=" + std::to_string(c.peer),
                            "shape"_a = shape, "dtype"_a = c.dtype, "group"_a = names.at(c.group), "gseq"_a = c.gseq,
                            "started"_a = c.start_ns / 1e9, "ended"_a = end, "done"_a = c.end_ns != 0,
                            "backward"_a = c.backward));
  }
  return out;
}

}  // namespace hpcdist_native

#include "testing.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace native = hpcdist_native;
  using native::py::arg;
  m.doc() = "hpcdist's compiled mpi backend (see hpcdist/mpi_backend/native.py)";
  native::py::class_<native::Spec>(m, "Spec", "What the Python side decides for a group")
      .def(native::py::init([](std::string backend_name, std::string who, std::string desc, std::string name,
                               std::vector<int> ranks, native::ms timeout, int64_t ring_bytes, int ring_tag,
                               int64_t ring_segment, bool yielding, bool survivors) {
             return native::Spec{std::move(backend_name), std::move(who), std::move(desc), std::move(name),
                                 std::move(ranks), timeout, ring_bytes, ring_tag, ring_segment, yielding, survivors};
           }),
           native::py::kw_only(), arg("backend_name"), arg("who"), arg("desc"), arg("name"), arg("ranks"),
           arg("timeout"), arg("ring_bytes"), arg("ring_tag"), arg("ring_segment"), arg("yielding"), arg("survivors"));
  m.def("make_group", &native::make_group, "A process group over an MPI communicator, with the Python group for the "
        "rest", arg("comm"), arg("rank"), arg("size"), arg("fallback"), arg("spec"));
  m.def("make_backend", &native::make_backend, "The backend alone (shrink_group's new one), with the Python group "
        "for the rest", arg("comm"), arg("rank"), arg("size"), arg("fallback"), arg("spec"));
  m.def("overdue", &native::overdue, "The calls of every group past their timeout, as the watchdog reports them");
  m.def("ledger", &native::ledger_calls, "The last calls of every group, oldest first, each made by "
        "call_type(**fields)", arg("call_type"));
  m.def("set_ledger", [](bool on, size_t size) { native::ledger().set(on, size); }, "Record calls in the ledger "
        "(True) or not (False, the default), keeping the last `size` (0: as many as now)", arg("on"), arg("size") = 0);
  m.def("oldest_pending", [] { return native::ledger().oldest_pending(); },
        "The start (monotonic seconds) of the oldest call in flight, or 0");
#ifdef HPCDIST_NATIVE_TESTING
  hpcdist_testing::define(m);
#endif
}
