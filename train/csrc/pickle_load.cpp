// Runs libtorch's own unpickler (the one behind torch::pickle_load) over the pickle of a
// file written by Python's `torch.save`, so `segtool import` needs no Python at run time.
//
// Division of labour with train/src/import/:
//   Rust  opens the container (zip, or the pre-1.6 legacy stream), rewrites the pickle
//         into the subset this unpickler accepts (it turns `OrderedDict()` into None and
//         cannot BUILD one, so a plain `model.state_dict()` would not load), and supplies
//         each storage's bytes on request;
//   C++   (this file) unpickles, maps every storage to the CPU (GPU-saved checkpoints name
//         "cuda:0"), and hands back each tensor with its path of dict keys / list indices.
// Choosing the state dict inside the tree ("state_dict", "module." ...) is Rust's job.
//
// No C++ exception crosses the C ABI: all are caught and their message copied out.

#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

extern "C" {
// Storage bytes for `key`: sets `*data`/`*len` (owned by the callee, valid until
// segtool_unpickle returns) and returns 0, or returns non-zero when there is no such record.
typedef int (*segtool_record_fn)(void* ctx, const char* key, const char** data, size_t* len);
// One tensor: `path[0..depth]` are NUL-terminated keys from the root (valid during the
// call); `tensor` is a heap `at::Tensor*` the callee now owns (tch's `C_tensor`).
typedef void (*segtool_tensor_fn)(void* ctx, const char* const* path, size_t depth, void* tensor);
// One scalar leaf (str, int, float, bool), as text; `kind`: 0 str, 1 int, 2 float, 3 bool.
// What the file says about itself (an mmsegmentation checkpoint's meta: class names,
// palette, config text) is read from these.
typedef void (*segtool_value_fn)(void* ctx, const char* const* path, size_t depth, const char* text,
                                 int kind);
}

namespace {

// Key under which the Rust rewrite stores the state a pickle BUILD would have set on a
// dict (an OrderedDict's `_metadata`): bookkeeping, not data, so it is not walked.
constexpr const char* kBuildStateKey = "__segtool_build_state__";
// Deepest path walked; matches MAX_NESTING in train/src/import/pickle.rs.
constexpr size_t kMaxDepth = 200;

struct Walker {
  segtool_tensor_fn on_tensor;
  segtool_value_fn on_value;
  void* ctx;
  size_t skipped = 0;  // non-tensor leaves: epoch ints, floats, strings, None, objects
  std::vector<std::string> path;

  void child(std::string key, const c10::IValue& v) {
    // The Rust rewrite refuses pickles nesting deeper than MAX_NESTING; a list holding
    // itself (through the memo) is still infinitely deep: stop before the stack does.
    if (path.size() >= kMaxDepth) {
      throw std::runtime_error("objects nested deeper than " + std::to_string(kMaxDepth) +
                               " levels (a list or dict that contains itself?)");
    }
    path.push_back(std::move(key));
    walk(v);
    path.pop_back();
  }

  void value(const std::string& text, int kind) {
    std::vector<const char*> keys;
    for (const auto& k : path) keys.push_back(k.c_str());
    on_value(ctx, keys.data(), keys.size(), text.c_str(), kind);
    skipped++;
  }

  void walk(const c10::IValue& v) {
    if (v.isTensor()) {
      std::vector<const char*> keys;
      for (const auto& k : path) keys.push_back(k.c_str());
      on_tensor(ctx, keys.data(), keys.size(), new at::Tensor(v.toTensor()));
    } else if (v.isString()) {
      value(v.toStringRef(), 0);
    } else if (v.isInt()) {
      value(std::to_string(v.toInt()), 1);
    } else if (v.isDouble()) {
      value(std::to_string(v.toDouble()), 2);
    } else if (v.isBool()) {
      value(v.toBool() ? "true" : "false", 3);
    } else if (v.isGenericDict()) {
      for (const auto& entry : v.toGenericDict()) {
        const auto& k = entry.key();
        if (k.isString() && k.toStringRef() == kBuildStateKey) continue;
        if (k.isString()) child(k.toStringRef(), entry.value());
        else if (k.isInt()) child(std::to_string(k.toInt()), entry.value());  // optimizer state
        else skipped++;
      }
    } else if (v.isList()) {
      auto list = v.toListRef();
      for (size_t i = 0; i < list.size(); i++) child(std::to_string(i), list[i]);
    } else if (v.isTuple()) {
      const auto& elems = v.toTupleRef().elements();
      for (size_t i = 0; i < elems.size(); i++) child(std::to_string(i), elems[i]);
    } else {
      skipped++;
    }
  }
};

// Python classes the unpickler does not know (numpy scalars, argparse.Namespace, ...)
// become empty objects of a made-up class instead of aborting the load.
c10::StrongTypePtr opaque_type(const c10::QualifiedName& name) {
  return c10::StrongTypePtr(nullptr, c10::ClassType::create(name, {}));
}

c10::intrusive_ptr<c10::ivalue::Object> opaque_object(const c10::StrongTypePtr& type, c10::IValue) {
  return c10::ivalue::Object::create(type, 0);
}

void copy_message(const char* what, char* err, size_t err_len) {
  if (err && err_len) std::snprintf(err, err_len, "%s", what);
}

}  // namespace

extern "C" {

// Unpickles `pkl[0..pkl_len]` (protocol 2) and calls `on_tensor` for every tensor in it.
// Returns 0 on success, with `*skipped` = the number of non-tensor values; -1 on failure,
// with the reason in `err` (NUL-terminated, truncated to `err_len`).
int segtool_unpickle(const char* pkl, size_t pkl_len, segtool_record_fn read_record,
                     segtool_tensor_fn on_tensor, segtool_value_fn on_value, void* ctx,
                     size_t* skipped, char* err, size_t err_len) {
  try {
    size_t pos = 0;
    auto reader = [&](char* buf, size_t n) {
      n = std::min(n, pkl_len - pos);
      std::memcpy(buf, pkl + pos, n);
      pos += n;
      return n;
    };
    auto record = [&](const std::string& key) {
      const char* data = nullptr;
      size_t len = 0;
      if (read_record(ctx, key.c_str(), &data, &len) != 0)
        throw std::runtime_error("the file has no data for storage `" + key + "`");
      at::DataPtr ptr = c10::GetCPUAllocator()->allocate(len);
      if (len) std::memcpy(ptr.get(), data, len);
      return ptr;
    };
    torch::jit::Unpickler unpickler(reader, opaque_type, opaque_object, record,
                                    at::Device(at::kCPU));  // map_location="cpu"
    c10::IValue root = unpickler.parse_ivalue();
    Walker walker{on_tensor, on_value, ctx};
    walker.walk(root);
    if (skipped) *skipped = walker.skipped;
    return 0;
  } catch (const c10::Error& e) {
    copy_message(e.what_without_backtrace(), err, err_len);  // what() adds a C++ backtrace
  } catch (const std::exception& e) {
    copy_message(e.what(), err, err_len);
  } catch (...) {
    copy_message("unknown C++ exception", err, err_len);
  }
  return -1;
}

}  // extern "C"
