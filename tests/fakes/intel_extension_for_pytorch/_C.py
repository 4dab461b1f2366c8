"""init_python_bindings.cpp:16-21: ``m.def("_has_xpu", []() { return true; })`` under BUILD_WITH_XPU."""
HAS_XPU = True


def _has_xpu() -> bool:
    return HAS_XPU
