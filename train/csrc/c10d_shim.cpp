// libtorch's c10d behind a C ABI, for train/src/distributed/: a TCPStore rendezvous, a
// ProcessGroupGloo (CPU tensors; ProcessGroupNCCL when built with USE_C10D_NCCL), the
// collectives segtool needs (all_reduce sum/avg/max, broadcast, all_gather, barrier),
// each waited on with a timeout, and SyncBatchNorm as a torch::autograd::Function whose
// forward all-reduces the per-channel (sum, sum of squares, count) and whose backward
// all-reduces (sum dy, sum dy*(x-mean)), as torch.nn.SyncBatchNorm does.
// amp (train/src/amp.rs): CPU/CUDA autocast state with a dtype, and GradScaler's unscale.
// env (train/src/env_report.rs, `segtool doctor`): libtorch's version and build
// configuration, NCCL's version (headers and library), CUDA device properties and the
// caching allocator's peak memory (CUDA builds only).
//
// Tensors cross as `at::Tensor*` (tch's C_tensor). Every function returns NULL on
// success or a malloc'ed error message (free it with segtool_c10d_free_string); no C++
// exception crosses the ABI.

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/headeronly/version.h>
#ifdef USE_C10D_NCCL
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <nccl.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

char* copy_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

template <typename F>
char* guarded(const char* what, F&& f) {
  try {
    f();
    return nullptr;
  } catch (const c10::Error& e) {
    return copy_string(std::string(what) + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return copy_string(std::string(what) + ": " + e.what());
  } catch (...) {
    return copy_string(std::string(what) + ": unknown C++ exception");
  }
}

using Backend = c10d::Backend;

struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<Backend> backend;
  int rank;
  int world;
  bool nccl;
  // Every collective's tensors live here: the CPU for gloo, the rank's own GPU (cuda:N,
  // with its index) for NCCL. A tensor on another GPU would make NCCL run the collective
  // on a communicator of the wrong device, or hang.
  at::Device device{at::kCPU};
};

std::chrono::milliseconds ms(int64_t timeout_ms) {
  return std::chrono::milliseconds(timeout_ms);
}

// Both backends: a tensor must be on the group's device (the Rust side builds every
// collective's tensors there: ProcessGroup::device).
void check_tensor(const Group& g, const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.defined(), name, " is an undefined tensor");
  if (!g.nccl) {
    TORCH_CHECK(t.device().is_cpu(), name, " is on ", t.device(),
                ": the gloo process group takes CPU tensors only (use the nccl backend for CUDA)");
  } else {
    TORCH_CHECK(t.device() == g.device, name, " is on ", t.device(),
                ": this rank's nccl process group is bound to ", g.device,
                " and takes tensors on that GPU only");
  }
  TORCH_CHECK(t.is_contiguous(), name, " is not contiguous");
}

// Waits for `work` up to `timeout`; throws on timeout or on a failed collective (a
// peer that died closes its sockets: gloo reports that as an error here).
void wait(const c10::intrusive_ptr<c10d::Work>& work, int64_t timeout_ms) {
  bool done = false;
  std::string error;
  try {
    done = work->wait(ms(timeout_ms));
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!error.empty()) {
    TORCH_CHECK(false, error, " (timeout ", timeout_ms,
                " ms; a peer process that died, hung or called a different collective "
                "causes this: check the other ranks' output)");
  }
  TORCH_CHECK(done, "collective did not complete within ", timeout_ms, " ms");
}

// 0 sum, 1 avg (sum then divide by the world size), 2 max.
void all_reduce(Group& g, at::Tensor& t, int op, int64_t timeout_ms) {
  check_tensor(g, t, "all_reduce tensor");
  c10d::AllreduceOptions opts;
  opts.timeout = ms(timeout_ms);
  switch (op) {
    case 0:
    case 1:
      opts.reduceOp = c10d::ReduceOp::SUM;
      break;
    case 2:
      opts.reduceOp = c10d::ReduceOp::MAX;
      break;
    default:
      TORCH_CHECK(false, "unknown reduce op ", op);
  }
  if (op == 1) {
    TORCH_CHECK(at::isFloatingType(t.scalar_type()),
                "avg all_reduce needs a floating-point tensor, got ", t.scalar_type());
  }
  std::vector<at::Tensor> tensors{t};
  wait(g.backend->allreduce(tensors, opts), timeout_ms);
  if (op == 1) {
    at::NoGradGuard no_grad;
    t.div_(static_cast<double>(g.world));
  }
}

// SyncBatchNorm over every rank of a group (N, C, *): statistics over the global batch.
// The arithmetic runs in fp32 whatever the input's dtype, and only the output returns to
// it: under fp16 autocast the input is fp16, where x * x overflows for |x| > 256 (var =
// inf, invstd = 0, running_var = inf). PyTorch's batch_norm_stats / batch_norm_elemt
// accumulate in fp32 the same way.
struct SyncBatchNormFn : public torch::autograd::Function<SyncBatchNormFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor input,
                            at::Tensor weight, at::Tensor bias, at::Tensor running_mean,
                            at::Tensor running_var, double momentum, double eps,
                            Group* group, int64_t timeout_ms) {
    TORCH_CHECK(input.dim() >= 2, "SyncBatchNorm input needs at least 2 dims (N, C, ...)");
    const int64_t c = input.size(1);
    std::vector<int64_t> dims{0};
    for (int64_t d = 2; d < input.dim(); d++) dims.push_back(d);
    at::Tensor x = input.contiguous();
    at::Tensor xf = x.to(at::kFloat);
    // Sums in double: the global mean and variance come out as exact as the local ones.
    at::Tensor sum = xf.sum(dims, false, at::kDouble);
    at::Tensor sumsq = xf.square().sum(dims, false, at::kDouble);
    at::Tensor count = at::full({1}, static_cast<double>(x.numel() / std::max<int64_t>(c, 1)),
                                sum.options());
    at::Tensor stats = at::cat({sum, sumsq, count}).contiguous();
    all_reduce(*group, stats, 0, timeout_ms);
    const double n = stats[2 * c].item<double>();
    TORCH_CHECK(n > 0, "SyncBatchNorm: empty global batch");
    at::Tensor mean = stats.narrow(0, 0, c) / n;
    at::Tensor var = (stats.narrow(0, c, c) / n - mean * mean).clamp_min(0.0);
    at::Tensor invstd = (var + eps).rsqrt();
    if (running_mean.defined()) {
      at::NoGradGuard no_grad;
      running_mean.mul_(1.0 - momentum).add_(mean.to(running_mean.scalar_type()), momentum);
      const double unbias = n > 1 ? n / (n - 1) : 1.0;
      running_var.mul_(1.0 - momentum)
          .add_((var * unbias).to(running_var.scalar_type()), momentum);
    }
    std::vector<int64_t> shape(input.dim(), 1);
    shape[1] = c;
    at::Tensor mean_f = mean.to(at::kFloat);
    at::Tensor invstd_f = invstd.to(at::kFloat);
    at::Tensor scale = weight.defined() ? invstd_f * weight.to(at::kFloat) : invstd_f;
    at::Tensor out = (xf - mean_f.view(shape)) * scale.view(shape);
    if (bias.defined()) out = out + bias.to(at::kFloat).view(shape);
    // x in its own dtype (half the memory of xf for fp16); backward widens it again.
    ctx->save_for_backward({x, weight, mean_f, invstd_f});
    ctx->saved_data["n"] = n;
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    ctx->saved_data["timeout_ms"] = timeout_ms;
    return out.to(x.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor x = saved[0], weight = saved[1], mean = saved[2], invstd = saved[3];
    const double n = ctx->saved_data["n"].toDouble();
    Group* group = reinterpret_cast<Group*>(ctx->saved_data["group"].toInt());
    const int64_t timeout_ms = ctx->saved_data["timeout_ms"].toInt();
    const int64_t c = x.size(1);
    std::vector<int64_t> dims{0};
    for (int64_t d = 2; d < x.dim(); d++) dims.push_back(d);
    std::vector<int64_t> shape(x.dim(), 1);
    shape[1] = c;

    // fp32 throughout, as the forward (a loss-scaled fp16 dy times x - mean overflows).
    at::Tensor dy = grads[0].to(at::kFloat).contiguous();
    at::Tensor xmu = x.to(at::kFloat) - mean.view(shape);
    at::Tensor sum_dy = dy.sum(dims);
    at::Tensor sum_dy_xmu = (dy * xmu).sum(dims);
    at::Tensor grad_input, grad_weight, grad_bias;
    if (ctx->needs_input_grad(1) && weight.defined()) {
      grad_weight = (sum_dy_xmu * invstd).to(weight.scalar_type());
    }
    // fp32, as the parameters are (autograd casts a gradient to its input's dtype anyway).
    if (ctx->needs_input_grad(2)) grad_bias = sum_dy;
    if (ctx->needs_input_grad(0)) {
      // The statistics are functions of every rank's input: the gradient through them
      // needs the global sums of dy and dy * (x - mean).
      at::Tensor both = at::cat({sum_dy, sum_dy_xmu}).to(at::kDouble).contiguous();
      all_reduce(*group, both, 0, timeout_ms);
      at::Tensor mean_dy = (both.narrow(0, 0, c) / n).to(at::kFloat).view(shape);
      at::Tensor mean_dy_xmu = (both.narrow(0, c, c) / n).to(at::kFloat).view(shape);
      at::Tensor inv = invstd.view(shape);
      at::Tensor scale = weight.defined() ? inv * weight.to(at::kFloat).view(shape) : inv;
      grad_input = ((dy - mean_dy - xmu * inv * inv * mean_dy_xmu) * scale).to(x.scalar_type());
    }
    // One entry per forward argument after ctx.
    return {grad_input, grad_weight, grad_bias, at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

extern "C" {

typedef struct segtool_c10d_group segtool_c10d_group;

void segtool_c10d_free_string(char* s) { std::free(s); }

// 1 when this build has ProcessGroupNCCL.
int segtool_c10d_has_nccl() {
#ifdef USE_C10D_NCCL
  return 1;
#else
  return 0;
#endif
}

// Rendezvous at master_addr:port (rank 0 hosts the TCPStore) and creates the process
// group: backend "gloo" (CPU; cuda_device must be -1) or "nccl" (CUDA, only when built
// with it), bound to GPU `cuda_device`: it becomes this thread's current device before the
// group exists, as torch.cuda.set_device(local_rank) + init_process_group(device_id=).
char* segtool_c10d_group_new(const char* master_addr, uint16_t port, int world, int rank,
                             int64_t timeout_ms, const char* backend, int cuda_device,
                             segtool_c10d_group** out) {
  *out = nullptr;
  return guarded("creating the process group", [&] {
    TORCH_CHECK(world >= 1, "world size must be positive, got ", world);
    TORCH_CHECK(rank >= 0 && rank < world, "rank ", rank, " is not below world size ", world);
    const std::string name = backend;
    const std::string host = master_addr;
    c10d::TCPStoreOptions opts;
    opts.port = port;
    opts.isServer = rank == 0;
    opts.numWorkers = static_cast<size_t>(world);
    opts.waitWorkers = true;
    opts.timeout = ms(timeout_ms);
    auto group = std::make_unique<Group>();
    group->rank = rank;
    group->world = world;
    group->nccl = false;
    try {
      group->store = c10::make_intrusive<c10d::TCPStore>(host, opts);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "TCPStore rendezvous at ", host, ":", port, " (rank ", rank, " of ",
                  world, ") failed: ", e.what());
    }
    if (name == "gloo") {
      TORCH_CHECK(cuda_device == -1, "the gloo process group runs on the CPU, not cuda:",
                  cuda_device);
      auto gopts = c10d::ProcessGroupGloo::Options::create(ms(timeout_ms));
      const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
      if (iface && *iface) {
        gopts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(iface));
      } else if (host == "127.0.0.1" || host == "localhost" || host == "::1") {
        gopts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(host));
      } else {
        gopts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      group->backend = c10::make_intrusive<c10d::ProcessGroupGloo>(group->store, rank, world, gopts);
    } else if (name == "nccl") {
#ifdef USE_C10D_NCCL
      // ProcessGroupNCCL would only fail later, in its first collective, and less clearly.
      TORCH_CHECK(c10::cuda::device_count() > 0,
                  "backend \"nccl\" needs a CUDA device, and no CUDA device is visible to "
                  "this process (no GPU or driver, or CUDA_VISIBLE_DEVICES hides them); use "
                  "\"gloo\" with --device cpu");
      const int visible = static_cast<int>(c10::cuda::device_count());
      TORCH_CHECK(cuda_device >= 0 && cuda_device < visible, "rank ", rank,
                  ": the nccl group needs this rank's GPU, cuda:", cuda_device, ", but ",
                  visible, " GPU(s) are visible");
      // Before ProcessGroupNCCL exists: its communicator, its barrier's device guess and
      // the CUDA context all follow the current device.
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(cuda_device));
      const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(cuda_device));
      auto nopts = c10d::ProcessGroupNCCL::Options::create();
      nopts->timeout = ms(timeout_ms);
      group->backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(group->store, rank, world, nopts);
      group->backend->setBoundDeviceId(device);
      // The communicator now, not at the first collective: a bad GPU or NCCL set-up fails
      // here with every rank present.
      group->backend->eagerConnectSingleDevice(device);
      group->nccl = true;
      group->device = device;
#else
      TORCH_CHECK(false,
                  "backend \"nccl\" is not available: segtool was built without NCCL "
                  "(no nccl.h / CUDA runtime headers were found at build time); use \"gloo\" "
                  "with CPU tensors");
#endif
    } else {
      TORCH_CHECK(false, "unknown backend \"", name, "\" (gloo, nccl)");
    }
    *out = reinterpret_cast<segtool_c10d_group*>(group.release());
  });
}

void segtool_c10d_group_free(segtool_c10d_group* g) {
  try {
    delete reinterpret_cast<Group*>(g);
  } catch (...) {
  }
}

char* segtool_c10d_all_reduce(segtool_c10d_group* g, at::Tensor* t, int op, int64_t timeout_ms) {
  return guarded("all_reduce", [&] { all_reduce(*reinterpret_cast<Group*>(g), *t, op, timeout_ms); });
}

char* segtool_c10d_broadcast(segtool_c10d_group* g, at::Tensor* t, int root, int64_t timeout_ms) {
  return guarded("broadcast", [&] {
    Group& group = *reinterpret_cast<Group*>(g);
    check_tensor(group, *t, "broadcast tensor");
    TORCH_CHECK(root >= 0 && root < group.world, "broadcast root ", root, " out of range");
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = ms(timeout_ms);
    std::vector<at::Tensor> tensors{*t};
    wait(group.backend->broadcast(tensors, opts), timeout_ms);
  });
}

// outputs: world tensors shaped like input, filled with each rank's input.
char* segtool_c10d_all_gather(segtool_c10d_group* g, at::Tensor* input, at::Tensor** outputs,
                              size_t n_outputs, int64_t timeout_ms) {
  return guarded("all_gather", [&] {
    Group& group = *reinterpret_cast<Group*>(g);
    check_tensor(group, *input, "all_gather input");
    TORCH_CHECK(n_outputs == static_cast<size_t>(group.world), "all_gather needs ", group.world,
                " output tensors, got ", n_outputs);
    std::vector<at::Tensor> outs;
    for (size_t i = 0; i < n_outputs; i++) {
      check_tensor(group, *outputs[i], "all_gather output");
      TORCH_CHECK(outputs[i]->sizes() == input->sizes() &&
                      outputs[i]->scalar_type() == input->scalar_type(),
                  "all_gather output ", i, " does not match the input's shape and dtype");
      outs.push_back(*outputs[i]);
    }
    std::vector<std::vector<at::Tensor>> out_lists{outs};
    std::vector<at::Tensor> inputs{*input};
    c10d::AllgatherOptions opts;
    opts.timeout = ms(timeout_ms);
    wait(group.backend->allgather(out_lists, inputs, opts), timeout_ms);
  });
}

char* segtool_c10d_barrier(segtool_c10d_group* g, int64_t timeout_ms) {
  return guarded("barrier", [&] {
    Group& group = *reinterpret_cast<Group*>(g);
    c10d::BarrierOptions opts;
    opts.timeout = ms(timeout_ms);
    wait(group.backend->barrier(opts), timeout_ms);
  });
}

// SyncBatchNorm in training mode; `*out` receives a new tensor (tch owns it). weight,
// bias, running_mean and running_var may be NULL. The group must outlive the backward.
char* segtool_c10d_sync_batch_norm(segtool_c10d_group* g, at::Tensor* input, at::Tensor* weight,
                                   at::Tensor* bias, at::Tensor* running_mean,
                                   at::Tensor* running_var, double momentum, double eps,
                                   int64_t timeout_ms, at::Tensor** out) {
  *out = nullptr;
  return guarded("SyncBatchNorm", [&] {
    Group* group = reinterpret_cast<Group*>(g);
    check_tensor(*group, input->contiguous(), "SyncBatchNorm input");
    TORCH_CHECK((running_mean == nullptr) == (running_var == nullptr),
                "SyncBatchNorm needs both running statistics or neither");
    auto opt = [](at::Tensor* t) { return t ? *t : at::Tensor(); };
    at::Tensor y = SyncBatchNormFn::apply(*input, opt(weight), opt(bias), opt(running_mean),
                                          opt(running_var), momentum, eps, group, timeout_ms);
    *out = new at::Tensor(y);
  });
}

// torch.cuda.set_device(index) for this thread; an error on a build without CUDA.
char* segtool_cuda_set_device(int index) {
  return guarded("setting the current CUDA device", [&] {
#ifdef USE_C10D_NCCL
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
#else
    TORCH_CHECK(false, "this build of segtool has no CUDA (built without NCCL), cuda:", index);
#endif
  });
}

// A tensor of n floats on the meta device (no storage): the CPU tests hand it to the
// collectives to see check_tensor refuse a tensor that is not on the group's device.
char* segtool_c10d_meta_tensor(int64_t n, at::Tensor** out) {
  *out = nullptr;
  return guarded("creating a meta tensor", [&] {
    *out = new at::Tensor(at::empty({n}, at::TensorOptions().device(at::kMeta)));
  });
}

// --- env: what this build and this machine have (`segtool doctor`) ----------------------

// "2.13.0": the libtorch headers this shim was compiled against.
const char* segtool_env_torch_version() { return TORCH_VERSION; }

// at::show_config(): libtorch's build settings (compiler, CUDA/cuDNN versions, BLAS, ...).
// NULL on failure; free with segtool_c10d_free_string.
char* segtool_env_torch_config() {
  try {
    return copy_string(at::show_config());
  } catch (...) {
    return nullptr;
  }
}

// NCCL's version code (e.g. 22907 for 2.29.7) from the headers this shim was compiled
// against, and from the library loaded now (ncclGetVersion, no GPU needed). 0 when this
// build has no NCCL; *runtime is -1 when the library call fails.
int segtool_env_nccl_version(int* compiled, int* runtime) {
#ifdef USE_C10D_NCCL
  *compiled = NCCL_VERSION_CODE;
  int v = 0;
  *runtime = ncclGetVersion(&v) == ncclSuccess ? v : -1;
  return 1;
#else
  *compiled = 0;
  *runtime = 0;
  return 0;
#endif
}

// The CUDA runtime and cuDNN versions libtorch was built with (CUDART_VERSION, e.g.
// 13000; CUDNN_VERSION, e.g. 92000), 0 when it has none; *hooks is 0 when libtorch_cuda
// is not loaded at all (then both are 0).
void segtool_env_torch_cuda_versions(int64_t* cudart, int64_t* cudnn, int* hooks) {
  *cudart = 0;
  *cudnn = 0;
  *hooks = 0;
  try {
    *cudart = at::globalContext().versionCUDART();
    *hooks = 1;
  } catch (...) {
  }
  try {
    *cudnn = at::globalContext().versionCuDNN();
  } catch (...) {
  }
}

// The CUDA devices visible now, or why there are none: NULL and *count >= 1, or the CUDA
// runtime's error ("no CUDA-capable device is detected", "found no NVIDIA driver", ...)
// and *count = 0. Never prints.
char* segtool_env_cuda_probe(int* count) {
  *count = 0;
  return guarded("CUDA", [&] {
#ifdef USE_C10D_NCCL
    *count = static_cast<int>(c10::cuda::device_count_ensure_non_zero());
#else
    TORCH_CHECK(false, "this build of segtool cannot query CUDA devices (built without NCCL)");
#endif
  });
}

// Properties of CUDA device `index`: its name (NUL-terminated, cut to name_len), total
// memory in bytes and compute capability.
char* segtool_env_cuda_device(int index, char* name, size_t name_len, uint64_t* total_bytes,
                              int* major, int* minor) {
  return guarded("reading CUDA device properties", [&] {
#ifdef USE_C10D_NCCL
    TORCH_CHECK(index >= 0 && index < static_cast<int>(c10::cuda::device_count()),
                "no CUDA device ", index);
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index));
    if (name_len > 0) {
      std::strncpy(name, p->name, name_len - 1);
      name[name_len - 1] = '\0';
    }
    *total_bytes = static_cast<uint64_t>(p->totalGlobalMem);
    *major = p->major;
    *minor = p->minor;
#else
    (void)index; (void)name; (void)name_len; (void)total_bytes; (void)major; (void)minor;
    TORCH_CHECK(false, "this build of segtool has no CUDA device queries (built without NCCL)");
#endif
  });
}

// The CUDA caching allocator's peak allocated bytes on `device` since the last reset
// (torch.cuda.max_memory_allocated); reset != 0 then starts a new peak.
char* segtool_env_cuda_peak_allocated(int device, int reset, int64_t* peak_bytes) {
  return guarded("reading CUDA memory statistics", [&] {
#ifdef USE_C10D_NCCL
    const auto d = static_cast<c10::DeviceIndex>(device);
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(d);
    *peak_bytes = stats.allocated_bytes[0].peak;  // StatType::AGGREGATE
    if (reset) c10::cuda::CUDACachingAllocator::resetPeakStats(d);
#else
    (void)device; (void)reset; (void)peak_bytes;
    TORCH_CHECK(false, "this build of segtool has no CUDA memory statistics (built without NCCL)");
#endif
  });
}

// torch.backends.cudnn.allow_tf32 / torch.backends.cuda.matmul.allow_tf32 together
// (libtorch's defaults: cuDNN on, cuBLAS off). The GPU tests compare with the CPU in
// full fp32.
char* segtool_env_set_allow_tf32(int allow) {
  return guarded("setting TF32", [&] {
    at::globalContext().setAllowTF32CuDNN(allow != 0);
    at::globalContext().setAllowTF32CuBLAS(allow != 0);
  });
}

// --- amp: autocast state and the GradScaler unscale (train/src/amp.rs) -------------------
// tch 0.26 drives only CUDA autocast (at::autocast::set_enabled), with no dtype, and has
// no binding for _amp_foreach_non_finite_check_and_unscale_ (a TensorList in place op).
// device: 0 CPU, 1 CUDA. dtype: a c10::ScalarType code (5 Half, 6 Float, 15 BFloat16).

static at::DeviceType amp_device(int device) {
  return device == 1 ? at::kCUDA : at::kCPU;
}

int segtool_autocast_is_enabled(int device) {
  try {
    return at::autocast::is_autocast_enabled(amp_device(device)) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

// Sets the autocast state of `device`; the previous one goes to *prev_enabled, *prev_dtype.
char* segtool_autocast_set(int device, int enabled, int dtype, int* prev_enabled,
                           int* prev_dtype) {
  return guarded("setting autocast", [&] {
    const at::DeviceType d = amp_device(device);
    *prev_enabled = at::autocast::is_autocast_enabled(d) ? 1 : 0;
    *prev_dtype = static_cast<int>(at::autocast::get_autocast_dtype(d));
    at::autocast::set_autocast_dtype(d, static_cast<at::ScalarType>(dtype));
    at::autocast::set_autocast_enabled(d, enabled != 0);
  });
}

int segtool_autocast_increment_nesting() { return at::autocast::increment_nesting(); }

// Leaving the outermost autocast region drops the cast-weights cache (as torch.autocast).
int segtool_autocast_decrement_nesting() {
  const int depth = at::autocast::decrement_nesting();
  if (depth == 0) at::autocast::clear_cache();
  return depth;
}

// GradScaler.unscale_: every defined gradient *= inv_scale in place; found_inf (a 1-element
// float tensor on the gradients' device) becomes 1 if any element is inf or NaN. The
// gradients must share one device and dtype.
char* segtool_amp_unscale(at::Tensor** grads, size_t n, at::Tensor* found_inf,
                          at::Tensor* inv_scale) {
  return guarded("unscaling gradients", [&] {
    std::vector<at::Tensor> list;
    for (size_t i = 0; i < n; i++) {
      if (grads[i] && grads[i]->defined()) list.push_back(*grads[i]);
    }
    if (list.empty()) return;
    at::NoGradGuard no_grad;
    at::_amp_foreach_non_finite_check_and_unscale_(list, *found_inf, *inv_scale);
  });
}

}  // extern "C"
