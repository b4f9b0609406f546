// fp8attn: the eager entry, fp8attn_eager.fwd — fp8attn::fwd called from Python without torch's dispatcher.
//
// Why (docs/design.md, "The eager entry"): an eager call of the dispatcher op spends most of its host time in
// torch's Python-side handling of the op's 22 arguments, before our code runs; a METH_FASTCALL function taking
// the same arguments costs a few percent of that. So the Python wrappers call this module when it loads, and the
// dispatcher op wherever the dispatcher must see the call: under torch.compile (the wrappers route that to the
// op), with a tensor subclass, a torch function or dispatch mode active, or a profiler recording
// (RecordFunction callbacks) - then fwd returns NotImplemented and the wrapper calls the op.
//
// It reads tensor metadata through ATen and the Python C API, so it is built against one torch and one Python
// (next to the op, or from the shipped source at first import); its docstring names that torch, and
// fp8attn/ops.py loads it only under it. Everything after reading the arguments is fwd_call.h, shared with the op.
#include <Python.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/Tensor.h>
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <stdexcept>
#include <string>

#include "fwd_call.h"

extern "C" AOTITorchError aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream);

namespace {

using fp8attn_torch::TensorArg;

// The schema's argument positions (fwd_op.cpp): tensors first, the optional output_scale at 20.
constexpr int kNumArgs = 22;
constexpr int kOutputScale = 20;
constexpr const char* kTensorNames[] = {"q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_k", "seqused_k",
                                        "block_table", "q_descale", "k_descale", "v_descale", "s_aux"};
constexpr int kNumLeadingTensors = 13;
constexpr int kRequired = 4;  // q, k, v, out

TensorArg read(const at::Tensor& t, const char* name) {
  return TensorArg(name, t.dim(), t.sizes().data(), t.strides().data(),
                   static_cast<fp8attn_torch::ScalarType>(t.scalar_type()), t.data_ptr(),
                   static_cast<int32_t>(t.device().type()), t.device().index());
}

// The tensor behind a Python argument, or nullptr for None; sets *plain = false for anything the dispatcher must
// see (a subclass, a tensor that needs grad under grad mode, a non-tensor where a tensor belongs).
const at::Tensor* tensor_of(PyObject* obj, bool optional, bool* plain) {
  if (optional && obj == Py_None) return nullptr;
  if (!THPVariable_CheckExact(obj)) {
    *plain = false;
    return nullptr;
  }
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (t.requires_grad() && torch::autograd::GradMode::is_enabled()) *plain = false;
  return &t;
}

PyObject* not_here() { Py_RETURN_NOTIMPLEMENTED; }

// The dispatcher has to see the call: a mode or a profiler is watching.
bool dispatcher_watching() {
  return at::impl::torch_function_mode_enabled() || c10::impl::TorchDispatchModeTLS::any_modes_set() ||
         at::hasCallbacks();
}

PyObject* fwd(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != kNumArgs) {
    PyErr_Format(PyExc_TypeError, "fp8attn_eager.fwd takes %d arguments (fp8attn::fwd's schema), got %zd", kNumArgs,
                 nargs);
    return nullptr;
  }
  if (dispatcher_watching()) return not_here();
  bool plain = true;
  const at::Tensor* tensors[kNumLeadingTensors];
  for (int i = 0; i < kNumLeadingTensors; ++i) tensors[i] = tensor_of(args[i], i >= kRequired, &plain);
  const at::Tensor* output_scale = tensor_of(args[kOutputScale], true, &plain);
  if (!plain || !tensors[0]->is_cuda()) return not_here();
  // A q, k or v with a non-unit last stride is copied by the wrapper before the op (interface.py), not here.
  for (int i = 0; i < 3; ++i) {
    if (tensors[i]->dim() > 0 && tensors[i]->size(-1) > 1 && tensors[i]->stride(-1) != 1) return not_here();
  }

  fp8attn_torch::FwdCall call;
  TensorArg* slots[kNumLeadingTensors] = {&call.q, &call.k, &call.v, &call.out, &call.lse, &call.cu_seqlens_q,
                                          &call.cu_seqlens_k, &call.seqused_k, &call.block_table, &call.q_descale,
                                          &call.k_descale, &call.v_descale, &call.sink};
  for (int i = 0; i < kNumLeadingTensors; ++i) {
    *slots[i] = tensors[i] != nullptr ? read(*tensors[i], kTensorNames[i]) : TensorArg(kTensorNames[i]);
  }
  call.output_scale = output_scale != nullptr ? read(*output_scale, "output_scale") : TensorArg("output_scale");
  call.max_seqlen_q = PyLong_AsLongLong(args[13]);
  call.max_seqlen_k = PyLong_AsLongLong(args[14]);
  call.softmax_scale = PyFloat_AsDouble(args[15]);
  const int causal = PyObject_IsTrue(args[16]);
  call.causal = causal == 1;
  call.window_left = PyLong_AsLongLong(args[17]);
  call.window_right = PyLong_AsLongLong(args[18]);
  call.num_splits = PyLong_AsLongLong(args[19]);
  call.softcap = PyFloat_AsDouble(args[21]);
  if (PyErr_Occurred()) return nullptr;  // a scalar of the wrong type: the wrappers pass ints, floats and a bool

  // As torch's own ops do, the C++ work runs without the GIL (the caller's argument tuple keeps the tensors).
  struct ReleaseGil {
    PyThreadState* state = PyEval_SaveThread();
    ~ReleaseGil() { PyEval_RestoreThread(state); }
  };
  std::string error;  // set (never empty) when the call failed
  bool invalid_argument = false;
  {
    ReleaseGil released;
    try {
      fp8attn_fwd_params p;
      const int32_t device = fp8attn_torch::fill_params(call, &p);
      c10::DeviceGuard guard(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
      // From torch's caching allocator on the current stream, as at::empty would (and from a capture's pool under
      // CUDA graph capture), without at::empty's dispatch; freed when this returns, after the launch is enqueued.
      c10::DataPtr workspace;
      auto allocate = [&](size_t bytes) {
        workspace = c10::GetAllocator(c10::DeviceType::CUDA)->allocate(bytes);
        return workspace.get();
      };
      auto current_stream = [&] {
        void* stream = nullptr;
        if (aoti_torch_get_current_cuda_stream(device, &stream) != AOTI_TORCH_SUCCESS) {
          throw std::runtime_error("fp8attn: cannot get the current CUDA stream");
        }
        return stream;
      };
      fp8attn_torch::plan_and_run(p, allocate, current_stream);
      // out and lse were written in place: their version counters move, as for any in-place op.
      for (const at::Tensor* written : {tensors[3], tensors[4]}) {
        if (written != nullptr && !written->is_inference()) torch::autograd::impl::bump_version(*written);
      }
    } catch (const std::invalid_argument& e) {
      error = e.what(), invalid_argument = true;
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "fp8attn: a C++ exception without a message";
    }
  }
  if (!error.empty()) {
    PyErr_SetString(invalid_argument ? PyExc_ValueError : PyExc_RuntimeError, error.c_str());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* last_error_code(PyObject* /*module*/, PyObject* /*unused*/) {
  return PyLong_FromLong(fp8attn_torch::last_error_code());
}

PyMethodDef kMethods[] = {
    {"fwd", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fwd)), METH_FASTCALL,
     "fp8attn::fwd's arguments, in its schema's order; None, or NotImplemented where the dispatcher op must run"},
    {"last_error_code", last_error_code, METH_NOARGS,
     "the fp8attn status code of this thread's last failed fwd (0 after a success)"},
    {nullptr, nullptr, 0, nullptr}};

// The docstring ends with the torch it serves: fp8attn/ops.py reads it from the file before loading the module.
PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "fp8attn_eager",
                       "fp8attn::fwd without the dispatcher (eager calls), built for torch " FP8ATTN_EAGER_TORCH_VERSION,
                       -1, kMethods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_fp8attn_eager() { return PyModule_Create(&kModule); }
