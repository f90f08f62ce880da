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
// with that text, as NCCL's watchdog does. Every call also goes into a fixed ring of `Call`s (`record`), written
// without Python objects, that hang forensics read as hpcdist.commcall.Call objects (`ledger()`).
#include <torch/extension.h>
#include <torch/version.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <pybind11/chrono.h>

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's extensions: ULFM's MPIX_Comm_revoke and MPIX_Comm_get_failed
#endif
#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing.h"

// One collective as `call` runs it (NativeBackend::call): MPI_<blocking>(args) or MPI_<nonblocking>(args, &request).
#define COLLECTIVE(blocking, nonblocking, ...)      \
  call([&] { return MPI_##blocking(__VA_ARGS__); }, \
       [&](MPI_Request* request) { return MPI_##nonblocking(__VA_ARGS__, request); })

namespace {

namespace py = pybind11;
using c10d::Work;
using WorkPtr = c10::intrusive_ptr<Work>;
using Tensors = std::vector<at::Tensor>;
using ms = std::chrono::milliseconds;
using Future = c10::ivalue::Future;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

MPI_Comm comm_of(uint64_t handle) {  // mpi4py's Comm.handle: a pointer (Open MPI) or an int (MPICH and its ABI)
  static_assert(sizeof(MPI_Comm) == sizeof(intptr_t) || sizeof(MPI_Comm) == sizeof(int), "unknown MPI_Comm");
  MPI_Comm comm;
  if constexpr (sizeof(MPI_Comm) == sizeof(intptr_t)) {
    const intptr_t value = static_cast<intptr_t>(handle);
    std::memcpy(&comm, &value, sizeof comm);
  } else {
    const int value = static_cast<int>(static_cast<uint32_t>(handle));  // mpi4py gives MPICH's unsigned
    std::memcpy(&comm, &value, sizeof comm);
  }
  return comm;
}

MPI_Datatype mpi_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kChar: return MPI_INT8_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kShort: return MPI_INT16_T;
    case at::kInt: return MPI_INT32_T;
    case at::kLong: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(const c10d::ReduceOp& op, at::ScalarType t) {
  const bool integral = at::isIntegralType(t, /*includeBool=*/false);
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return MPI_SUM;
    case c10d::ReduceOp::PRODUCT: return MPI_PROD;
    case c10d::ReduceOp::MIN: return MPI_MIN;
    case c10d::ReduceOp::MAX: return MPI_MAX;
    case c10d::ReduceOp::BAND: return integral ? MPI_BAND : MPI_OP_NULL;
    case c10d::ReduceOp::BOR: return integral ? MPI_BOR : MPI_OP_NULL;
    case c10d::ReduceOp::BXOR: return integral ? MPI_BXOR : MPI_OP_NULL;
    default: return MPI_OP_NULL;  // AVG, PREMUL_SUM: the Python group's
  }
}

std::string seconds(int64_t millis) {  // 1500 -> "1.5"
  std::string text = std::to_string(millis / 1e3);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

// Drop a Python reference: with the GIL, or (a static destructor after Python ended) leaked.
void release(py::object& object) {
  if (!Py_IsInitialized()) {
    object.release();
    return;
  }
  py::gil_scoped_acquire gil;
  object = py::object();
}

c10::intrusive_ptr<Future> tensor_future() {
  return c10::make_intrusive<Future>(c10::ListType::create(c10::TensorType::get()));
}

// Whether a tensor can go to MPI from here: on the CPU, dense, with at most INT_MAX elements or bytes. These
// depend only on what every rank of a collective passes alike, so all ranks take the same path.
bool dense_cpu(const at::Tensor& t) {
  return t.device().is_cpu() && t.layout() == at::kStrided && t.nbytes() <= static_cast<size_t>(INT_MAX);
}

// The tensor's values in plain contiguous memory MPI can read: the tensor itself when it already is.
at::Tensor plain(const at::Tensor& t) {
  if (!t.is_conj() && !t.is_neg() && t.is_contiguous()) return t;  // the usual case, without three dispatched calls
  return t.resolve_conj().resolve_neg().contiguous();
}

// A buffer MPI may read and write: the tensor itself, or a contiguous copy written back by `done()`.
struct Staged {
  at::Tensor user, buf;
  explicit Staged(const at::Tensor& t) : user(t), buf(plain(t)) {}
  void* data() const { return buf.data_ptr(); }
  int count() const { return static_cast<int>(buf.numel()); }
  int bytes() const { return static_cast<int>(buf.nbytes()); }
  void done() {
    if (!buf.is_same(user)) user.copy_(buf);
  }
};

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

// The ledger: the last kRing calls of every group of this process, for hang forensics. A writer claims a slot
// with one atomic increment and stamps it with its call number (odd while it writes, so a reader skips a slot
// being written); strings are static (operation and dtype names) or the group's own (kept in `group_names`).
constexpr size_t kRing = 256;  // calls kept unless the trace asks for more (set_ledger)
constexpr int kDims = 4;  // the shape's first dimensions kept (the rest are rare; the count says how many)
struct Call {
  std::atomic<uint64_t> stamp{0};  // 2 * (call number) + 1 while written, + 2 once written
  const char* op = "";
  const char* dtype = "";
  int group = 0;  // index into group_names
  int peer = -1;  // the root, or -1
  int ndim = 0;
  std::array<int64_t, kDims> shape{};
  uint64_t gseq = 0;
  bool backward = false;  // issued while autograd ran a backward pass on this thread (DDP's gradient all-reduce)
  int64_t start_ns = 0;
  std::atomic<int64_t> end_ns{0};
};
struct Ring {
  explicit Ring(size_t n) : size(n), calls(new Call[n]) {}
  const size_t size;
  std::unique_ptr<Call[]> calls;
};
std::atomic<Ring*> ring{new Ring(kRing)};  // a larger one replaces it for a trace; the old one is never freed
std::atomic<bool> recording{false};  // set_ledger: hang forensics are on
std::atomic<uint64_t> ring_next{0};
std::mutex names_mutex;
std::vector<std::string> group_names;  // every group's name, e.g. "world" or "[0, 1]"; only appended to

int name_group(const std::string& name) {
  std::lock_guard<std::mutex> lock(names_mutex);
  group_names.push_back(name);
  return static_cast<int>(group_names.size() - 1);
}

// Record a call as it is issued: its call number, to mark it finished (`finished`).
constexpr uint64_t kUnrecorded = UINT64_MAX;
uint64_t record(const char* op, const at::Tensor* t, int group, int peer, uint64_t gseq) {
  if (!recording.load(std::memory_order_relaxed)) return kUnrecorded;
  const uint64_t id = ring_next.fetch_add(1, std::memory_order_relaxed);
  Ring* r = ring.load(std::memory_order_acquire);
  Call& c = r->calls[id % r->size];
  c.stamp.store(2 * id + 1, std::memory_order_release);
  c.op = op;
  c.group = group;
  c.peer = peer;
  c.gseq = gseq;
  c.dtype = t ? c10::toString(t->scalar_type()) : "";
  c.ndim = t ? static_cast<int>(t->dim()) : 0;
  for (int i = 0; i < c.ndim && i < kDims; ++i) c.shape[i] = t->size(i);
  c.backward = torch::autograd::get_current_graph_task_id() != -1;
  c.end_ns.store(0, std::memory_order_relaxed);
  c.start_ns = now_ns();
  c.stamp.store(2 * id + 2, std::memory_order_release);
  return id;
}

void finished(uint64_t id) {
  if (id == kUnrecorded) return;
  Ring* r = ring.load(std::memory_order_acquire);
  Call& c = r->calls[id % r->size];
  if (c.stamp.load(std::memory_order_acquire) == 2 * id + 2) c.end_ns.store(now_ns(), std::memory_order_release);
}

// The fields of each call `ledger` exports, in the order it passes them to the Python type it is given
// (hpcdist.commcall.Call: its first fields are these, as a test checks): op, root ("root=N" or ""), shape, dtype as
// c10 names it ("Float"), group name, gseq, start and end in seconds of CLOCK_MONOTONIC (end None: in flight),
// done, backward.
constexpr const char* kCallFields[] = {"op",   "peer",    "shape", "dtype", "group",
                                       "gseq", "started", "ended", "done",  "backward"};

// The ring's calls, oldest first, each made by `call_type(*fields)`. Slots being written are left out.
std::vector<py::object> ledger(const py::object& call_type) {
  struct Copy {
    const char* op;
    const char* dtype;
    int group, peer, ndim;
    std::array<int64_t, kDims> shape;
    uint64_t gseq;
    bool backward;
    int64_t start_ns, end_ns;
  };
  std::vector<Copy> copies;
  const uint64_t next = ring_next.load(std::memory_order_acquire);
  const Ring* r = ring.load(std::memory_order_acquire);
  for (uint64_t id = next > r->size ? next - r->size : 0; id < next; ++id) {
    const Call& c = r->calls[id % r->size];
    if (c.stamp.load(std::memory_order_acquire) != 2 * id + 2) continue;
    Copy copy{c.op, c.dtype, c.group, c.peer, c.ndim, c.shape, c.gseq, c.backward, c.start_ns,
              c.end_ns.load(std::memory_order_acquire)};
    if (c.stamp.load(std::memory_order_acquire) == 2 * id + 2) copies.push_back(copy);
  }
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(names_mutex);
    names = group_names;
  }
  std::vector<py::object> out;
  for (const Copy& c : copies) {
    py::tuple shape(std::min(c.ndim, kDims));
    for (int i = 0; i < std::min(c.ndim, kDims); ++i) shape[i] = c.shape[i];
    const std::string peer = c.peer < 0 ? "" : "root=" + std::to_string(c.peer);
    const py::object end = c.end_ns ? py::object(py::float_(c.end_ns / 1e9)) : py::object(py::none());
    // in kCallFields' order
    out.push_back(call_type(c.op, peer, shape, c.dtype, names.at(c.group), c.gseq, c.start_ns / 1e9, end,
                            c.end_ns != 0, c.backward));
  }
  return out;
}

py::tuple call_fields() {
  py::tuple names(std::size(kCallFields));
  for (size_t i = 0; i < std::size(kCallFields); ++i) names[i] = kCallFields[i];
  return names;
}

// Record calls (or not), keeping the last `size` of them: a different size takes a fresh ring, which the trace
// asks for while no call is in flight; the calls of the old ring are not carried over.
void set_ledger(bool on, size_t size) {
  if (size && size != ring.load()->size) ring.store(new Ring(size));
  recording.store(on);
}

// The start (monotonic seconds) of the oldest call still in flight, or 0: what the forensics' watchdog polls.
double oldest_pending() {
  const uint64_t next = ring_next.load(std::memory_order_acquire);
  const Ring* r = ring.load(std::memory_order_acquire);
  for (uint64_t id = next > r->size ? next - r->size : 0; id < next; ++id) {
    const Call& c = r->calls[id % r->size];
    if (c.stamp.load(std::memory_order_acquire) == 2 * id + 2 && c.end_ns.load(std::memory_order_acquire) == 0) {
      return c.start_ns / 1e9;
    }
  }
  return 0;
}

// Run `f` without the GIL: a blocking MPI call must never hold it (the watchdog and progress threads need it).
template <class F>
void without_gil(F&& f) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release unlocked;
    f();
  } else {
    f();
  }
}

// A synchronous operation's Work: it finished before it was returned.
class DoneWork : public Work {
 public:
  explicit DoneWork(Tensors out) : out_(std::move(out)) { completed_ = true; }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(ms) override { return true; }
  Tensors result() override { return out_; }
  c10::intrusive_ptr<Future> getFuture() override {
    auto fut = tensor_future();
    fut->markCompleted(c10::IValue(out_));
    return fut;
  }

 private:
  Tensors out_;
};

// An asynchronous operation's Work: settled by the group's worker thread, with its Future.
class QueuedWork : public Work {
 public:
  QueuedWork(Tensors out, std::string what) : out_(std::move(out)), what_(std::move(what)), fut_(tensor_future()) {}
  bool isCompleted() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_;
  }
  bool isSuccess() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_ && !exception_;
  }
  std::exception_ptr exception() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return exception_;
  }
  Tensors result() override { return out_; }
  bool wait(ms timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (timeout == kNoTimeout) {
      cv_.wait(lock, [&] { return completed_; });
    } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
      C10_THROW_ERROR(DistBackendError, what_ + " did not complete within " + seconds(timeout.count()) +
                                            " s (the timeout given to wait(); the operation goes on)");
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }
  c10::intrusive_ptr<Future> getFuture() override { return fut_; }
  void settle(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      completed_ = true;
      exception_ = error;
    }
    cv_.notify_all();
    if (error) {
      fut_->setError(error);
    } else {
      fut_->markCompleted(c10::IValue(out_));
    }
  }

 private:
  Tensors out_;
  std::string what_;
  c10::intrusive_ptr<Future> fut_;
};

// A Work of the Python group: every query goes to the Python object (torch's trampoline forwards only two).
class PyWork : public Work {
 public:
  explicit PyWork(py::object work) : work_(std::move(work)) {}
  ~PyWork() override { release(work_); }
  bool wait(ms timeout) override {
    py::gil_scoped_acquire gil;
    py::object done = timeout == kNoTimeout ? work_.attr("wait")() : work_.attr("wait")(timeout);
    return done.cast<bool>();
  }
  bool isCompleted() override { return call<bool>("is_completed"); }
  bool isSuccess() const override { return call<bool>("is_success"); }
  std::exception_ptr exception() const override {
    py::gil_scoped_acquire gil;
    py::object error = work_.attr("exception")();
    if (error.is_none()) return nullptr;
    return std::make_exception_ptr(std::runtime_error(py::str(error).cast<std::string>()));
  }
  int sourceRank() const override { return call<int>("source_rank"); }
  Tensors result() override { return call<Tensors>("result"); }
  void synchronize() override { wait(kNoTimeout); }
  c10::intrusive_ptr<Future> getFuture() override {
    py::gil_scoped_acquire gil;
    return work_.attr("get_future")().cast<std::shared_ptr<torch::jit::PythonFutureWrapper>>()->fut;
  }

 private:
  template <class T>
  T call(const char* name) const {
    py::gil_scoped_acquire gil;
    return work_.attr(name)().cast<T>();
  }
  py::object work_;
};

// The rings' messages: segments of at most kSegment bytes (as ring.py's), tagged apart from ring.py's (7001 on).
constexpr int64_t kSegment = 1 << 20;
constexpr int kRingTag = 7000;

class NativeBackend;
std::mutex live_mutex;
std::set<NativeBackend*> live;  // every group of this process, for overdue()

class NativeBackend : public c10d::Backend {
 public:
  NativeBackend(uint64_t comm, int rank, int size, std::string who, std::string desc, ms timeout, int64_t ring_bytes,
                bool yielding, py::object fallback, const std::string& name, std::vector<int> ranks)
      : Backend(rank, size),
        comm_(comm_of(comm)),
        who_(std::move(who)),
        desc_(std::move(desc)),
        timeout_(timeout),
        ring_bytes_(ring_bytes),
        yielding_(yielding),
        py_(std::move(fallback)),
        ring_comm_(comm_of(py_.attr("_ring_comm").attr("handle").cast<uint64_t>())),
        group_(name_group(name)),
        ranks_(std::move(ranks)) {
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

  const std::string getBackendName() const override { return "mpi4py"; }
  bool supportsCoalescing() const override { return true; }

  // The text of each call of this group past its deadline (the watchdog ends the job with it).
  void overdue(std::vector<std::string>& out) const {
    const int64_t now = now_ns();
    for (const InFlight* slot : {&caller_, &worker_slot_}) {
      const int64_t deadline = slot->deadline.load(std::memory_order_acquire);
      if (deadline != 0 && now > deadline) {
        out.push_back(who_ + ": " + slot->name.load() + " on " + desc_ + " did not complete within " +
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
        ring_allreduce(s.buf, type, op);
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
        ring_reduce_scatter(from, dst.buf, type, op, "reduce_scatter");
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
        ring_reduce_scatter(from, dst.buf, type, op, "reduce_scatter_tensor");
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
    timeout_ = timeout;
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

  // A large all_reduce goes round the segmented ring (ring_allreduce): at 2 ranks it moves half the bytes of the
  // MPI's own algorithm and measured up to 2x faster from 32 MiB (docs/measurements/mpi-backend.md).
  bool ring(const at::Tensor& t) const { return size_ > 1 && static_cast<int64_t>(t.nbytes()) >= ring_bytes_; }

  // A reduce_scatter goes round the ring (ring_reduce_scatter) at every size: it reads the input where it lies, so
  // torch's in-place form (the output is this rank's block of the input) needs no copy, and it measured faster
  // than Open MPI's Reduce_scatter_block from 1 MiB at 2 ranks (docs/measurements/mpi-backend.md).
  bool scatter_ring() const { return size_ > 1; }

  // Wait for the rings' requests, yielding the CPU between tests: on a core of its own sched_yield returns at once,
  // and where other processes share the cores the peer gets to run (measured faster than MPI_Waitall under load).
  int wait_all(int n, MPI_Request* requests) const {
    for (int done = 0;;) {
      const int code = MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE);
      if (code != MPI_SUCCESS || done) return code;
      sched_yield();
    }
  }

  // The reduce-scatter half of a ring: p-1 steps; in each, this rank sends one block's partial result to the right
  // and adds the left's to its own input for that block. `mine[b]` is this rank's input for block b (`counts[b]`
  // elements), only read; `keep(step, b)` is where the partial result of block b received at `step` is kept (the
  // last step's block is this rank's own: its result). Kept in `mine[b]` itself (all_reduce, or reduce_scatter's
  // output that is its block of the input), a segment is received into scratch and added there; kept elsewhere, it
  // is received there and this rank's input is added to it. Messages are cut into segments of kSegment bytes, the
  // next one in flight while the last is added (still in cache), over the Python group's ring communicator.
  template <class Keep>
  void ring_reduce(const std::vector<const char*>& mine, const std::vector<int64_t>& counts, int item, Keep keep,
                   MPI_Datatype type, MPI_Op op, const char* name) {
    const int p = size_, r = rank_, right = (r + 1) % p, left = (r + p - 1) % p;
    const int64_t per_segment = std::max<int64_t>(1, kSegment / item);
    if (halves_.numel() < 2 * per_segment * item) halves_ = at::empty({2 * per_segment * item}, at::kByte);
    char* const half[2] = {static_cast<char*>(halves_.data_ptr()),
                           static_cast<char*>(halves_.data_ptr()) + per_segment * item};
    for (int step = 0; step < p - 1; ++step) {
      const int sent = (r + p - 1 - step) % p, received = (r + 2 * p - 2 - step) % p;
      const char* from = step == 0 ? mine[sent] : keep(step - 1, sent);
      char* into = keep(step, received);
      const bool in_place = into == mine[received];
      const int64_t segments = (std::max(counts[sent], counts[received]) + per_segment - 1) / per_segment;
      MPI_Request requests[2][2];
      auto length = [&](int64_t total, int64_t k) {  // elements of segment k of a block of `total`
        return std::clamp<int64_t>(total - k * per_segment, 0, per_segment);
      };
      auto post = [&](int64_t k) {
        const int64_t at = k * per_segment * item, got = length(counts[received], k), put = length(counts[sent], k);
        MPI_Request* pair = requests[k % 2];
        pair[0] = pair[1] = MPI_REQUEST_NULL;
        int code = MPI_SUCCESS;
        if (got) {
          code = MPI_Irecv(in_place ? half[k % 2] : into + at, static_cast<int>(got * item), MPI_BYTE, left, kRingTag,
                           ring_comm_, &pair[0]);
        }
        if (code == MPI_SUCCESS && put) {
          code = MPI_Isend(from + at, static_cast<int>(put * item), MPI_BYTE, right, kRingTag, ring_comm_, &pair[1]);
        }
        check(code, name);
      };
      if (segments) post(0);
      for (int64_t k = 0; k < segments; ++k) {
        if (k + 1 < segments) post(k + 1);
        check(wait_all(2, requests[k % 2]), name);
        const int64_t at = k * per_segment * item, got = length(counts[received], k);
        if (!got) continue;
        const void* add = in_place ? static_cast<const void*>(half[k % 2]) : mine[received] + at;
        check(MPI_Reduce_local(add, into + at, static_cast<int>(got), type, op), name);
      }
    }
  }

  // An all_reduce on a ring, in place: the reduce-scatter half above, then p-1 steps passing the finished blocks
  // on (ring.py's, without a Python step per segment). At 2 ranks it moves half the bytes of Open MPI's Allreduce.
  void ring_allreduce(at::Tensor& t, MPI_Datatype type, MPI_Op op) {
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
    ring_reduce(mine, counts, item, [&](int, int b) { return block[b]; }, type, op, "all_reduce");
    for (int step = 0; step < p - 1; ++step) {  // this rank's block is done; then the one from the left each step
      const int sent = (r + p - step) % p, received = (r + 2 * p - 1 - step) % p;
      MPI_Request pair[2];
      int code = MPI_Irecv(block[received], static_cast<int>(counts[received] * item), MPI_BYTE, left, kRingTag,
                           ring_comm_, &pair[0]);
      if (code == MPI_SUCCESS) {
        code = MPI_Isend(block[sent], static_cast<int>(counts[sent] * item), MPI_BYTE, right, kRingTag, ring_comm_,
                         &pair[1]);
      }
      check(code == MPI_SUCCESS ? wait_all(2, pair) : code, "all_reduce");
    }
  }

  // reduce_scatter on the ring: `from` holds every rank's block of the input (out.numel() elements each); `out` may
  // be this rank's block of it (torch's in-place form, which MPI's Reduce_scatter_block forbids: no copy needed).
  void ring_reduce_scatter(const std::vector<const char*>& from, at::Tensor& out, MPI_Datatype type, MPI_Op op,
                           const char* name) {
    const int item = static_cast<int>(out.element_size());
    const int64_t bytes = static_cast<int64_t>(out.nbytes());
    char* result = static_cast<char*>(out.data_ptr());
    at::Tensor partials = size_ > 2 ? at::empty({2 * bytes}, at::kByte) : at::Tensor();  // the blocks passed on
    char* partial = size_ > 2 ? static_cast<char*>(partials.data_ptr()) : nullptr;
    auto keep = [&](int step, int) { return step == size_ - 2 ? result : partial + step % 2 * bytes; };
    ring_reduce(from, std::vector<int64_t>(size_, out.numel()), item, keep, type, op, name);
  }

  // MPI's blocking call; or, where ranks share cores, its non-blocking twin waited on with sched_yield: a blocking
  // call busy-polls and starves the rank it waits for (raw Allreduce of 16 B took 5 ms at 4 ranks on 2 cores).
  // Every rank of the group decides alike (_create in __init__.py): MPI never matches a blocking call with a
  // non-blocking one.
  template <class Blocking, class Nonblocking>
  int call(Blocking blocking, Nonblocking nonblocking) const {
    if (!yielding_) return blocking();
    MPI_Request request;
    int code = nonblocking(&request);
    for (int done = 0; code == MPI_SUCCESS && !done;) {
      code = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (code == MPI_SUCCESS && !done) sched_yield();
    }
    return code;
  }

  void check(int code, const char* name) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    const std::string said = lost(code), error(text, length);
    C10_THROW_ERROR(DistBackendError, who_ + ": " + name + " on " + desc_ + " failed: " +
                                          (said.empty() ? error : said + " (" + error + ")"));
  }

  // For ULFM's error classes (Open MPI under --with-ft ulfm): which ranks were lost, as at the job's start, and the
  // communicator revoked so that the peers still in the same call return too. Else nothing.
  std::string lost(int code) const {
#if defined(OMPI_HAVE_MPI_EXT_FTMPI) && defined(MPI_ERR_PROC_FAILED)
    int kind = MPI_SUCCESS;
    MPI_Error_class(code, &kind);
    if (kind != MPI_ERR_PROC_FAILED && kind != MPI_ERR_PROC_FAILED_PENDING && kind != MPI_ERR_REVOKED) return "";
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
    MPIX_Comm_revoke(comm_);
    if (count == 0) return "another rank revoked the communicator after ranks were lost";
    return (count == 1 ? "rank " + ranks + " was" : "ranks " + ranks + " were") + " lost (process failed)";
#else
    (void)code;
    return "";
#endif
  }

  // The Python group records the call in the ledger itself, numbered among this group's collectives.
  template <bool Collective = true, class... A>
  WorkPtr fallback(const char* name, A&... args) {
    if (Collective) ++seq_;
    drain();
    py::gil_scoped_acquire gil;
    python_pending_ = true;
    py_.attr("_gseq") = seq_.load() - (Collective ? 1 : 0);
    return c10::make_intrusive<PyWork>(py_.attr(name)(args...));
  }

  // The Python group's asynchronous calls: settled before each call here, as the Python group does before its
  // own, so an error nobody waited for is raised at the next call whichever implementation takes it.
  void settle_python() {
    if (!python_pending_) return;
    py::gil_scoped_acquire gil;
    py_.attr("_check")();
    python_pending_ = py::len(py_.attr("_outstanding")) + py::len(py_.attr("_orphans")) > 0;
  }

  ms limit_of(ms given) const { return given.count() > 0 ? given : timeout_; }

  // Run an operation now (synchronous) or hand it to the worker (asynchronous), recording it in the ledger.
  // `shown` holds the tensor the ledger shows, `root` the group rank of a rooted collective (else -1).
  template <class F>
  WorkPtr issue(const char* name, const Tensors& out, bool async, ms given, int root, F&& op,
                const Tensors* shown = nullptr) {
    settle_python();
    ++seq_;
    const ms limit = limit_of(given);
    const Tensors& seen = shown ? *shown : out;
    const int peer = root < 0 ? -1 : ranks_.at(root);
    const uint64_t call = record(name, seen.empty() ? nullptr : &seen[0], group_, peer, seq_);
    if (std::this_thread::get_id() == worker_id_) {  // a future's callback issued it: run it where every rank's is
      Watched watch(worker_slot_, name, limit);
      without_gil([&] { op(comm_); });
      finished(call);
      return c10::make_intrusive<DoneWork>(out);
    }
    if (!async) {
      drain();
      {
        Watched watch(caller_, name, limit);
        without_gil([&] { op(comm_); });
      }
      finished(call);
      return c10::make_intrusive<DoneWork>(out);
    }
    auto work = c10::make_intrusive<QueuedWork>(out, who_ + ": " + name + " on " + desc_);
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      if (!worker_thread_.joinable()) start();
      queue_.push_back(Job{Op(std::forward<F>(op)), work, name, limit, call});
      ++pending_;
    }
    queue_cv_.notify_one();
    return work;
  }

  // Wait until the worker has run everything handed to it: operations run in the order they were issued.
  void drain() {
    if (pending_.load() == 0 || std::this_thread::get_id() == worker_id_) return;
    std::unique_lock<std::mutex> lock(queue_mutex_);
    without_gil([&] { idle_cv_.wait(lock, [&] { return pending_.load() == 0; }); });
  }

  void start() {
    worker_thread_ = std::thread([this] { run(); });
    worker_id_ = worker_thread_.get_id();
  }

  void run() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(queue_mutex_);
        queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr error;
      try {
        Watched watch(worker_slot_, job.name, job.limit);
        job.op(comm_);
      } catch (...) {
        error = std::current_exception();
      }
      finished(job.call);
      job.work->settle(error);  // runs the future's callbacks here; they may issue more (run in place)
      {
        std::lock_guard<std::mutex> lock(queue_mutex_);
        --pending_;
      }
      idle_cv_.notify_all();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      stopping_ = true;
    }
    queue_cv_.notify_all();
    if (worker_thread_.joinable() && std::this_thread::get_id() != worker_id_) {
      without_gil([&] { worker_thread_.join(); });
    }
  }

  MPI_Comm comm_;
  std::string who_, desc_;
  ms timeout_;
  int64_t ring_bytes_;
  bool yielding_;  // ranks share cores somewhere in the group: wait on non-blocking calls, yielding the CPU
  py::object py_;
  MPI_Comm ring_comm_;  // the Python group's duplicate of comm_, for the rings' messages
  at::Tensor halves_;   // the ring's two receive segments, kept: fresh pages cost page faults
  bool coalescing_ = false;
  bool python_pending_ = false;  // the Python group may have calls in flight
  std::atomic<uint64_t> seq_{0};
  int group_;               // this group's name in the ledger (group_names)
  std::vector<int> ranks_;  // the global rank of each group rank
  InFlight caller_, worker_slot_;  // what the caller's thread and the worker are in
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_, idle_cv_;
  std::deque<Job> queue_;
  std::atomic<int> pending_{0};
  bool stopping_ = false;
  std::thread worker_thread_;
  std::thread::id worker_id_;
};

// The process group torch gets: the backend for CPU and CUDA tensors, under its registered name (torch would say
// "custom", which DDP's logging and get_backend's users would see).
class NamedGroup : public c10d::ProcessGroup {
 public:
  NamedGroup(const c10::intrusive_ptr<NativeBackend>& backend, int rank, int size) : ProcessGroup(rank, size) {
    setDefaultBackend(BackendType::CUSTOM);
    for (auto device : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) setBackend(device, BackendType::CUSTOM, backend);
  }
  const std::string getBackendName() const override { return "mpi4py"; }
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 14  // torch 2.14 dropped it from ProcessGroup (a no-op since)
  void setSequenceNumberForGroup() override { getDefaultBackend()->setSequenceNumberForGroup(); }
#endif
  uint64_t getSequenceNumberForGroup() override { return getDefaultBackend()->getSequenceNumberForGroup(); }
};

std::vector<std::string> overdue() {
  std::vector<std::string> out;
  std::lock_guard<std::mutex> lock(live_mutex);
  for (const NativeBackend* backend : live) backend->overdue(out);
  return out;
}

c10::intrusive_ptr<c10d::ProcessGroup> make_group(uint64_t comm, int rank, int size, std::string who, std::string desc,
                                                  ms timeout, int64_t ring_bytes, bool yielding, py::object fallback,
                                                  const std::string& name, std::vector<int> ranks) {
  auto backend = c10::make_intrusive<NativeBackend>(comm, rank, size, std::move(who), std::move(desc), timeout,
                                                    ring_bytes, yielding, std::move(fallback), name, std::move(ranks));
  return c10::make_intrusive<NamedGroup>(backend, rank, size);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "hpcdist's compiled mpi backend (see hpcdist/mpi_backend/native.py)";
  m.def("make_group", &make_group, "A process group over an MPI communicator, with the Python group for the rest");
  m.def("overdue", &overdue, "The calls of every group past their timeout, as the watchdog reports them");
  m.def("ledger", &ledger, "The last calls of every group, oldest first, each made by call_type(*CALL_FIELDS' values)",
        py::arg("call_type"));
  m.attr("CALL_FIELDS") = call_fields();
  m.def("set_ledger", &set_ledger, "Record calls in the ledger's ring (True) or not (False, the default), keeping "
        "the last `size` (0: as many as now)", py::arg("on"), py::arg("size") = 0);
  m.def("oldest_pending", &oldest_pending, "The start (monotonic seconds) of the oldest call in flight, or 0");
#ifdef HPCDIST_NATIVE_TESTING
  hpcdist_testing::define(m);
#endif
}
