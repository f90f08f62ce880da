// Hooks for hpcdist's tests of the compiled backend below Python, built only into the test builds (the sanitizer
// tier's: -DHPCDIST_NATIVE_TESTING); the module then has a `testing` submodule. Never part of the normal build.
#pragma once
#ifdef HPCDIST_NATIVE_TESTING

#include <future>
#include <map>
#include <thread>

namespace hpcdist_testing {

namespace py = pybind11;
using namespace hpcdist_native;

// The backend's private parts a test drives: an asynchronous operation of its own choosing.
struct Access {
  static WorkPtr queue(NativeBackend& backend, std::function<void(MPI_Comm)> op) {
    return backend.issue("test", {}, true, ms(0), -1, std::move(op));
  }
};

// A deliberate data race (two threads add to one plain int), so a test can show that ThreadSanitizer is live.
inline int race(int rounds) {
  int shared = 0;
  auto add = [&] {
    for (int i = 0; i < rounds; ++i) shared = shared + 1;
  };
  std::thread other(add);
  add();
  other.join();
  return shared;
}

inline c10d::ReduceOp reduce_op(const std::string& name) {
  static const std::map<std::string, c10d::ReduceOp::RedOpType> ops = {
      {"sum", c10d::ReduceOp::SUM}, {"product", c10d::ReduceOp::PRODUCT}, {"min", c10d::ReduceOp::MIN},
      {"max", c10d::ReduceOp::MAX}, {"band", c10d::ReduceOp::BAND},       {"bor", c10d::ReduceOp::BOR},
      {"bxor", c10d::ReduceOp::BXOR}};
  return c10d::ReduceOp(ops.at(name));
}

// A ring over `comm` (mpi4py's handle) with messages of `segment` bytes, whose check throws at its `fail_at`-th
// call (counted from 1; 0: never), as a failed MPI call would, with the next segment's requests in flight.
inline Ring ring_over(uint64_t comm, int64_t segment, int fail_at, ms patience) {
  int rank = 0, size = 0;
  MPI_Comm c = comm_of(comm);
  MPI_Comm_rank(c, &rank);
  MPI_Comm_size(c, &size);
  auto calls = std::make_shared<int>(0);
  return Ring(c, rank, size, 7000, segment, patience, false, [calls, fail_at](int code, const char* name) {
    if (code != MPI_SUCCESS) throw std::runtime_error(std::string(name) + ": MPI error " + std::to_string(code));
    if (++*calls == fail_at) throw std::runtime_error(std::string(name) + ": failed on purpose");
  });
}

inline void all_reduce(uint64_t comm, at::Tensor t, const std::string& op, int64_t segment, int fail_at,
                       int64_t patience_ms) {
  Ring ring = ring_over(comm, segment, fail_at, ms(patience_ms));
  ring.all_reduce(t, mpi_type(t.scalar_type()), mpi_op(reduce_op(op), t.scalar_type()), "all_reduce");
}

inline void reduce_scatter(uint64_t comm, Tensors blocks, at::Tensor out, const std::string& op, int64_t segment) {
  Ring ring = ring_over(comm, segment, 0, ms(1000));
  std::vector<const char*> from;
  for (const at::Tensor& b : blocks) from.push_back(static_cast<const char*>(b.data_ptr()));
  ring.reduce_scatter(from, blocks, out, mpi_type(out.scalar_type()), mpi_op(reduce_op(op), out.scalar_type()),
                      "reduce_scatter");
}

// Writers record calls into a ledger of `slots` while readers copy it; every row a reader keeps must be whole:
// a writer's own name, a shape (d, d, d, d) and a peer that follow from its gseq. The rows that are not (0 when the
// seqlock holds) and the rows read.
inline std::pair<int64_t, int64_t> ledger_race(int writers, int readers, int calls, size_t slots) {
  Ledger ledger;
  ledger.set(true, slots);
  static const char* names[] = {"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7"};
  std::vector<at::Tensor> shapes;
  for (int64_t d = 1; d <= 4; ++d) shapes.push_back(at::empty({d, d, d, d}, at::kFloat));
  std::atomic<bool> writing{true};
  std::atomic<int64_t> torn{0}, rows{0};
  std::vector<std::thread> threads;
  // Past `calls`, the writers go on until a reader has read a row while they wrote (on a loaded machine the readers
  // may not run before the writers are done), for 60 s at most.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int w = 0; w < writers && w < 8; ++w) {
    threads.emplace_back([&, w] {
      for (int k = 0; k < calls || (rows.load() == 0 && std::chrono::steady_clock::now() < deadline); ++k) {
        const uint64_t id = ledger.record(names[w], &shapes[k % 4], w, k % 1000, k);
        if (k % 2) ledger.finished(id);
      }
    });
  }
  for (int r = 0; r < readers; ++r) {
    threads.emplace_back([&] {
      while (writing.load()) {
        for (const CallCopy& c : ledger.copies()) {
          const int64_t d = static_cast<int64_t>(c.gseq % 4) + 1;
          const bool whole = std::string(c.op) == names[c.group] && c.ndim == 4 && c.shape[0] == d &&
                             c.shape[3] == d && c.peer == static_cast<int>(c.gseq % 1000);
          torn += !whole;
          ++rows;
        }
      }
    });
  }
  for (int w = 0; w < writers && w < 8; ++w) threads[w].join();
  writing.store(false);
  for (size_t i = std::min(writers, 8); i < threads.size(); ++i) threads[i].join();
  return {torn.load(), rows.load()};
}

// A backend whose last reference is dropped on its own worker thread, by a future's callback: whether it was
// destroyed there and the callback after it ran (a joinable thread destroyed would end the process instead).
inline bool drop_on_worker(uint64_t comm, py::object fallback) {
  Spec spec{"mpi4py", "test", "test", "drop_on_worker", {0}, ms(60000), 1 << 30, 7000, 1 << 20, false};
  auto backend = c10::make_intrusive<NativeBackend>(comm, 0, 1, spec, std::move(fallback));
  std::promise<void> go, dropped;
  std::shared_future<void> ready = go.get_future().share();
  WorkPtr work = Access::queue(*backend, [ready](MPI_Comm) { ready.wait(); });
  auto future = work->getFuture();
  future->addCallback([keep = backend](Future&) mutable { keep.reset(); });  // the last reference, on the worker
  future->addCallback([&dropped](Future&) { dropped.set_value(); });
  backend.reset();
  py::gil_scoped_release unlocked;  // the backend's destructor takes the GIL on the worker to drop its Python group
  go.set_value();
  return dropped.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready;
}

inline void define(py::module_& module) {
  py::module_ m = module.def_submodule("testing", "Test-only hooks (built with -DHPCDIST_NATIVE_TESTING)");
  using py::arg;
  m.def("race", &race, py::call_guard<py::gil_scoped_release>(), "Race two threads on a plain int (TSan's proof)",
        arg("rounds"));
  m.def("all_reduce", &all_reduce, py::call_guard<py::gil_scoped_release>(),
        "The ring's all_reduce in place over a communicator, failing at its fail_at-th check (0: never)",
        arg("comm"), arg("tensor"), arg("op"), arg("segment"), arg("fail_at") = 0, arg("patience_ms") = 1000);
  m.def("reduce_scatter", &reduce_scatter, py::call_guard<py::gil_scoped_release>(),
        "The ring's reduce_scatter of one block per rank into out", arg("comm"), arg("blocks"), arg("out"), arg("op"),
        arg("segment"));
  m.def("ledger_race", &ledger_race, py::call_guard<py::gil_scoped_release>(),
        "Writers and readers on a ledger of its own: (torn rows, rows read)", arg("writers"), arg("readers"),
        arg("calls"), arg("slots"));
  m.def("drop_on_worker", &drop_on_worker, "Drop a backend's last reference on its worker: whether that went well",
        arg("comm"), arg("fallback"));
  m.def("leftovers", [] { return std::make_pair(leftovers().completed.load(), leftovers().abandoned.load()); },
        "Requests errors left in a ring: (completed after the error, abandoned with their memory kept)");
}

}  // namespace hpcdist_testing

#endif
