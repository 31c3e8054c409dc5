// tensor_args.h — checking and staging the tensors a c10d call hands the
// backend: one device and layout per operation, the flat forms of list
// arguments, and contiguous stand-ins for outputs that are not.
#pragma once

#include <functional>
#include <initializer_list>
#include <vector>

#include <ATen/ATen.h>

namespace plait_torch {

// Every tensor an operation touches: dense, on the CPU or (where this build
// has CUDA, device.h) a CUDA device.
void checkTensor(const at::Tensor& t, const char* what);
// The one device of an operation's tensors (the CPU when it has none).
c10::Device deviceOf(std::initializer_list<const std::vector<at::Tensor>*> lists, const char* what);
// One tensor per process, checked.
void checkSingle(const std::vector<at::Tensor>& tensors, const char* what);
// Same type and element count.
void checkSameShape(const at::Tensor& a, const at::Tensor& b, const char* what);
// The flat pair of the *_tensor collectives: `whole` holds `blocks` blocks
// the size of `part`, of the same type.
void checkBlocks(const at::Tensor& whole, const at::Tensor& part, int blocks, const char* what,
                 const char* wholeName);
// One row per tensor of a list, contiguous: the flat input of scatter and
// reduce_scatter.
at::Tensor packRows(const std::vector<at::Tensor>& tensors);
// After the call: row i of flat into targets[i] (all_gather's and gather's lists).
std::function<void()> unpackRows(const at::Tensor& flat, std::vector<at::Tensor> targets);
inline size_t bytesOf(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }
// A contiguous buffer for a tensor the call writes: the tensor itself, or a
// copy whose contents go back into the tensor after the call.
struct Staged {
  at::Tensor buffer;
  std::function<void()> copyBack;
};
Staged stageOutput(const at::Tensor& t, bool keepContents);
// a then b; either may be empty.
std::function<void()> chain(std::function<void()> a, std::function<void()> b);

}  // namespace plait_torch
