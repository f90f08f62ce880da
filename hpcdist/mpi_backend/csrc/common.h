// What every part of the compiled backend uses: MPI's handles and types for torch's, the GIL, plain buffers.
#pragma once

#include <torch/extension.h>

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's extensions: ULFM's MPIX_Comm_revoke and MPIX_Comm_get_failed
#endif

#include <chrono>
#include <climits>
#include <cstring>
#include <string>

namespace hpcdist_native {

namespace py = pybind11;
using Tensors = std::vector<at::Tensor>;
using ms = std::chrono::milliseconds;

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline MPI_Comm comm_of(uint64_t handle) {  // mpi4py's Comm.handle: a pointer (Open MPI) or an int (MPICH's ABI)
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

inline MPI_Datatype mpi_type(at::ScalarType t) {
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

inline MPI_Op mpi_op(const c10d::ReduceOp& op, at::ScalarType t) {
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

inline std::string seconds(int64_t millis) {  // 1500 -> "1.5"
  std::string text = std::to_string(millis / 1e3);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

// Drop a Python reference: with the GIL, or (a static destructor after Python ended) leaked.
inline void release(py::object& object) {
  if (!Py_IsInitialized()) {
    object.release();
    return;
  }
  py::gil_scoped_acquire gil;
  object = py::object();
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

// Whether a tensor can go to MPI from here: on the CPU, dense, with at most INT_MAX elements or bytes. These
// depend only on what every rank of a collective passes alike, so all ranks take the same path.
inline bool dense_cpu(const at::Tensor& t) {
  return t.device().is_cpu() && t.layout() == at::kStrided && t.nbytes() <= static_cast<size_t>(INT_MAX);
}

// The tensor's values in plain contiguous memory MPI can read: the tensor itself when it already is.
inline at::Tensor plain(const at::Tensor& t) {
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

// Whether an MPI error is one of ULFM's (Open MPI under --with-ft ulfm): a process failed, or a peer revoked the
// communicator after one did. Else (or without ULFM) false.
inline bool lost_process(int code) {
#if defined(OMPI_HAVE_MPI_EXT_FTMPI) && defined(MPI_ERR_PROC_FAILED)
  int kind = MPI_SUCCESS;
  MPI_Error_class(code, &kind);
  return kind == MPI_ERR_PROC_FAILED || kind == MPI_ERR_PROC_FAILED_PENDING || kind == MPI_ERR_REVOKED;
#else
  (void)code;
  return false;
#endif
}

// Under ULFM, the error a wait on `comm` ends with although its requests are pending: MPI_ERR_REVOKED once `comm` is
// revoked, MPI_ERR_PROC_FAILED once this process knows a member of it failed; else (and without ULFM) MPI_SUCCESS.
// Open MPI 5.0.11 left a ring's messages pending for good after a rank died in its middle (measured: survivors still
// waited after 150 s), though a survivor had revoked the communicator.
inline int interrupted(MPI_Comm comm) {
#if defined(OMPI_HAVE_MPI_EXT_FTMPI) && defined(MPI_ERR_PROC_FAILED)
  int revoked = 0, count = 0;
  if (MPIX_Comm_is_revoked(comm, &revoked) == MPI_SUCCESS && revoked) return MPI_ERR_REVOKED;
  MPI_Group failed;
  if (MPIX_Comm_get_failed(comm, &failed) == MPI_SUCCESS) {
    MPI_Group_size(failed, &count);
    MPI_Group_free(&failed);
  }
  return count ? MPI_ERR_PROC_FAILED : MPI_SUCCESS;
#else
  (void)comm;
  return MPI_SUCCESS;
#endif
}

// Revoke a communicator (ULFM), so that every call pending on it, this rank's and its peers', returns.
inline void revoke(MPI_Comm comm) {
#if defined(OMPI_HAVE_MPI_EXT_FTMPI) && defined(MPI_ERR_PROC_FAILED)
  MPIX_Comm_revoke(comm);
#else
  (void)comm;
#endif
}

}  // namespace hpcdist_native
