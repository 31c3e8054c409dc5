// tensor_args.cc — see tensor_args.h.
#include "tensor_args.h"

#include <optional>

#include <c10/util/Exception.h>

#include "device.h"

namespace plait_torch {

void checkTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "plait: ", what, ": an undefined tensor");
  TORCH_CHECK(t.device().is_cpu() || (t.device().is_cuda() && deviceBuilt()), "plait: ", what, ": a tensor on ",
              t.device(),
              deviceBuilt() ? "; plait_torch runs CPU and CUDA tensors"
                            : "; this plait_torch runs CPU tensors only (it was built against a torch without CUDA)");
  TORCH_CHECK(t.layout() == at::kStrided, "plait: ", what, ": sparse tensors are not supported");
}

c10::Device deviceOf(std::initializer_list<const std::vector<at::Tensor>*> lists, const char* what) {
  std::optional<c10::Device> device;
  for (const auto* list : lists)
    for (const at::Tensor& t : *list) {
      if (!t.defined()) continue;
      if (!device) device = t.device();
      TORCH_CHECK(*device == t.device(), "plait: ", what, ": tensors on ", *device, " and ", t.device(),
                  "; one operation runs on one device");
    }
  return device.value_or(c10::Device(c10::kCPU));
}

void checkSingle(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "plait: ", what, " takes one tensor per process, got ", tensors.size());
  checkTensor(tensors[0], what);
}

void checkSameShape(const at::Tensor& a, const at::Tensor& b, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "plait: ", what, ": tensors of different types (", a.scalar_type(),
              " and ", b.scalar_type(), ")");
  TORCH_CHECK(a.numel() == b.numel(), "plait: ", what, ": tensors of ", a.numel(), " and ", b.numel(), " elements");
}

void checkBlocks(const at::Tensor& whole, const at::Tensor& part, int blocks, const char* what,
                 const char* wholeName) {
  checkTensor(whole, what);
  checkTensor(part, what);
  TORCH_CHECK(whole.scalar_type() == part.scalar_type(), "plait: ", what, ": tensors of different types (",
              whole.scalar_type(), " and ", part.scalar_type(), ")");
  TORCH_CHECK(whole.numel() == part.numel() * blocks, "plait: ", what, ": ", wholeName, " has ", whole.numel(),
              " elements; it needs ", blocks, " x ", part.numel());
}

at::Tensor packRows(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> rows;
  rows.reserve(tensors.size());
  for (const auto& t : tensors) rows.push_back(t.reshape({-1}));
  return at::stack(rows);
}

std::function<void()> unpackRows(const at::Tensor& flat, std::vector<at::Tensor> targets) {
  return [flat, targets = std::move(targets)]() mutable {
    for (size_t i = 0; i < targets.size(); ++i)
      targets[i].copy_(flat[static_cast<int64_t>(i)].view(targets[i].sizes()));
  };
}


// A contiguous buffer for a tensor the call writes: the tensor itself, or a
// copy whose contents go back into the tensor after the call.
Staged stageOutput(const at::Tensor& t, bool keepContents) {
  if (t.is_contiguous()) return {t, nullptr};
  at::Tensor buffer = keepContents ? t.contiguous() : at::empty(t.sizes(), t.options());
  at::Tensor target = t;
  return {buffer, [target, buffer]() mutable { target.copy_(buffer); }};
}

std::function<void()> chain(std::function<void()> a, std::function<void()> b) {
  if (!a) return b;
  if (!b) return a;
  return [a = std::move(a), b = std::move(b)] {
    a();
    b();
  };
}

}  // namespace plait_torch
