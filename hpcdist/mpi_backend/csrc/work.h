// The backend's Work objects: a synchronous call's (done when returned), an asynchronous one's (settled by the
// group's worker thread), and the Python group's (every query forwarded to it).
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <condition_variable>
#include <mutex>

#include "common.h"

namespace hpcdist_native {

using c10d::Work;
using WorkPtr = c10::intrusive_ptr<Work>;
using Future = c10::ivalue::Future;

inline c10::intrusive_ptr<Future> tensor_future() {
  return c10::make_intrusive<Future>(c10::ListType::create(c10::TensorType::get()));
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
  // The future first (its callbacks run here), then the work, as torch's gloo does: whoever wait()ed for the work
  // then finds its future completed too.
  void settle(std::exception_ptr error) {
    if (error) {
      fut_->setError(error);
    } else {
      fut_->markCompleted(c10::IValue(out_));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      completed_ = true;
      exception_ = error;
    }
    cv_.notify_all();
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
  // The Python group's error as itself: rethrown into Python, it is the same exception (type, message, cause).
  std::exception_ptr exception() const override {
    py::gil_scoped_acquire gil;
    py::object error = work_.attr("exception")();
    if (error.is_none()) return nullptr;
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
    return std::make_exception_ptr(py::error_already_set());
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

}  // namespace hpcdist_native
