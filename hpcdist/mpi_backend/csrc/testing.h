// Hooks for hpcdist's tests of the compiled backend below Python, built only into the test builds (the sanitizer
// tier's: -DHPCDIST_NATIVE_TESTING); the module then has a `testing` submodule. Never part of the normal build.
#pragma once
#ifdef HPCDIST_NATIVE_TESTING

#include <thread>

namespace hpcdist_testing {

namespace py = pybind11;

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

inline void define(py::module_& module) {
  py::module_ m = module.def_submodule("testing", "Test-only hooks (built with -DHPCDIST_NATIVE_TESTING)");
  m.def("race", &race, py::call_guard<py::gil_scoped_release>(), "Race two threads on a plain int (TSan's proof)",
        py::arg("rounds"));
}

}  // namespace hpcdist_testing

#endif
