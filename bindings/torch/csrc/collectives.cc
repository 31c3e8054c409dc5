// collectives.cc — ProcessGroupPlait's c10d operations: each checks its
// arguments, stages what is not contiguous, and submits one Plait call (or
// one group of them) with what to copy back after it (process_group_plait.h).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "process_group_plait.h"
#include "reduction.h"
#include "tensor_args.h"

namespace plait_torch {

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  checkSingle(tensors, "broadcast");
  const int root = checkRoot(opts.rootRank, "broadcast");
  Staged s = stageOutput(tensors[0], /*keepContents=*/true);
  at::Tensor buf = s.buffer;
  return submit(c10d::OpType::BROADCAST, "broadcast", tensors, {}, opts.timeout, opts.asyncOp,
                {[buf, root](ncclComm_t c, cudaStream_t st) {
                   return ncclBroadcast(buf.data_ptr(), buf.data_ptr(), bytesOf(buf), ncclUint8, root, c, st);
                 },
                 s.copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  checkSingle(tensors, "all_reduce");
  const at::Tensor& t = tensors[0];
  Reduction red = reductionFor(t, opts.reduceOp, "all_reduce");
  Staged s = stageOutput(t, /*keepContents=*/true);
  at::Tensor buf = s.buffer;
  if (red.bitwise != ncclNumOps) {
    at::Tensor gathered = at::empty({size_, t.numel()}, t.options());
    const auto op = opts.reduceOp.op_;
    return submit(c10d::OpType::ALLREDUCE, "all_reduce", tensors, {}, opts.timeout, opts.asyncOp,
                  {[buf, gathered](ncclComm_t c, cudaStream_t st) {
                     return ncclAllGather(buf.data_ptr(), gathered.data_ptr(), bytesOf(buf), ncclUint8, c, st);
                   },
                   chain([buf, gathered, op] { foldBitwise(gathered, buf, op); }, s.copyBack)});
  }
  at::Tensor real = realView(buf);
  return submit(c10d::OpType::ALLREDUCE, "all_reduce", tensors, {}, opts.timeout, opts.asyncOp,
                {[real, red](ncclComm_t c, cudaStream_t st) {
                   return red.run(c, [&](ncclRedOp_t op) {
                     return ncclAllReduce(real.data_ptr(), real.data_ptr(), real.numel(), red.type, op, c, st);
                   });
                 },
                 s.copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                      const c10d::AllreduceCoalescedOptions& opts) {
  return coalesced("allreduce_coalesced", tensors.size(), [&](size_t i) {
    std::vector<at::Tensor> one{tensors[i]};
    allreduce(one, opts);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  checkSingle(tensors, "reduce");
  const int root = checkRoot(opts.rootRank, "reduce");
  const at::Tensor& t = tensors[0];
  Reduction red = reductionFor(t, opts.reduceOp, "reduce");
  TORCH_CHECK(red.bitwise == ncclNumOps, "plait: reduce: bitwise reductions are available in all_reduce only");
  Staged s = stageOutput(t, /*keepContents=*/true);
  at::Tensor real = realView(s.buffer);
  return submit(c10d::OpType::REDUCE, "reduce", tensors, {}, opts.timeout, opts.asyncOp,
                {[real, red, root](ncclComm_t c, cudaStream_t st) {
                   return red.run(c, [&](ncclRedOp_t op) {
                     return ncclReduce(real.data_ptr(), real.data_ptr(), real.numel(), red.type, op, root, c, st);
                   });
                 },
                 rank_ == root ? s.copyBack : nullptr});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions& opts) {
  checkBlocks(output, input, size_, "all_gather_into_tensor", "output");
  at::Tensor in = input.contiguous();
  Staged s = stageOutput(output, /*keepContents=*/false);
  at::Tensor out = s.buffer;
  return submit(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {output}, {in}, opts.timeout, opts.asyncOp,
                {[in, out](ncclComm_t c, cudaStream_t st) {
                   return ncclAllGather(in.data_ptr(), out.data_ptr(), bytesOf(in), ncclUint8, c, st);
                 },
                 s.copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  checkSingle(inputs, "all_gather");
  checkList(outputs, inputs[0], "all_gather", "output");
  at::Tensor in = inputs[0].contiguous();
  at::Tensor flat = at::empty({size_, in.numel()}, in.options());
  std::vector<at::Tensor> targets = outputs[0];
  return submit(c10d::OpType::ALLGATHER, "all_gather", targets, {in}, opts.timeout, opts.asyncOp,
                {[in, flat](ncclComm_t c, cudaStream_t st) {
                   return ncclAllGather(in.data_ptr(), flat.data_ptr(), bytesOf(in), ncclUint8, c, st);
                 },
                 unpackRows(flat, targets)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputLists.size() == inputs.size(), "plait: allgather_coalesced: ", inputs.size(), " inputs and ",
              outputLists.size(), " output lists");
  return coalesced("allgather_coalesced", inputs.size(), [&](size_t i) {
    std::vector<std::vector<at::Tensor>> out{outputLists[i]};
    std::vector<at::Tensor> in{inputs[i]};
    allgather(out, in, opts);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "plait: all_gather_into_tensor_coalesced: ", inputs.size(),
              " inputs and ", outputs.size(), " outputs");
  return coalesced("all_gather_into_tensor_coalesced", inputs.size(),
                   [&](size_t i) { _allgather_base(outputs[i], inputs[i], opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::GatherOptions& opts) {
  checkSingle(inputs, "gather");
  const int root = checkRoot(opts.rootRank, "gather");
  at::Tensor in = inputs[0].contiguous();
  std::vector<at::Tensor> targets;
  at::Tensor flat;
  if (rank_ == root) {
    checkList(outputs, in, "gather", "root's output");
    targets = outputs[0];
    flat = at::empty({size_, in.numel()}, in.options());
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(), "plait: gather: only the root passes output tensors");
  }
  return submit(c10d::OpType::GATHER, "gather", targets, {in}, opts.timeout, opts.asyncOp,
                {[in, flat, root](ncclComm_t c, cudaStream_t st) {
                   return ncclGather(in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, bytesOf(in),
                                     ncclUint8, root, c, st);
                 },
                 unpackRows(flat, targets)});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ScatterOptions& opts) {
  checkSingle(outputs, "scatter");
  const int root = checkRoot(opts.rootRank, "scatter");
  at::Tensor flat;
  if (rank_ == root) {
    checkList(inputs, outputs[0], "scatter", "root's input");
    flat = packRows(inputs[0]);
  } else {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(), "plait: scatter: only the root passes input tensors");
  }
  Staged s = stageOutput(outputs[0], /*keepContents=*/false);
  at::Tensor out = s.buffer;
  return submit(c10d::OpType::SCATTER, "scatter", outputs, {}, opts.timeout, opts.asyncOp,
                {[flat, out, root](ncclComm_t c, cudaStream_t st) {
                   return ncclScatter(flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(), bytesOf(out),
                                      ncclUint8, root, c, st);
                 },
                 s.copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  checkBlocks(input, output, size_, "reduce_scatter_tensor", "input");
  Reduction red = reductionFor(output, opts.reduceOp, "reduce_scatter_tensor");
  TORCH_CHECK(red.bitwise == ncclNumOps, "plait: reduce_scatter: bitwise reductions are available in all_reduce only");
  at::Tensor in = realView(input.contiguous());
  Staged s = stageOutput(output, /*keepContents=*/false);
  at::Tensor out = realView(s.buffer);
  return submit(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {output}, {in}, opts.timeout, opts.asyncOp,
                {[in, out, red](ncclComm_t c, cudaStream_t st) {
                   return red.run(c, [&](ncclRedOp_t op) {
                     return ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), red.type, op, c, st);
                   });
                 },
                 s.copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) {
  checkSingle(outputs, "reduce_scatter");
  checkList(inputs, outputs[0], "reduce_scatter", "input");
  at::Tensor flat = packRows(inputs[0]).view({-1});
  return _reduce_scatter_base(outputs[0], flat, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "plait: reduce_scatter_tensor_coalesced: ", inputs.size(),
              " inputs and ", outputs.size(), " outputs");
  return coalesced("reduce_scatter_tensor_coalesced", inputs.size(),
                   [&](size_t i) { _reduce_scatter_base(outputs[i], inputs[i], opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                std::vector<int64_t>& outputSplits,
                                                                std::vector<int64_t>& inputSplits,
                                                                const c10d::AllToAllOptions& opts) {
  checkTensor(output, "all_to_all_single");
  checkTensor(input, "all_to_all_single");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "plait: all_to_all_single: output is ",
              output.scalar_type(), ", input ", input.scalar_type());
  at::Tensor in = input.contiguous();
  Staged s = stageOutput(output, /*keepContents=*/false);
  at::Tensor out = s.buffer;
  const int n = size_;
  if (outputSplits.empty() && inputSplits.empty()) {
    TORCH_CHECK(in.numel() == out.numel() && in.numel() % n == 0, "plait: all_to_all_single: input and output need ",
                "the same number of elements, a multiple of ", n, " (", in.numel(), ", ", out.numel(), ")");
    return submit(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {output}, {in}, opts.timeout, opts.asyncOp,
                  {[in, out, n](ncclComm_t c, cudaStream_t st) {
                     return ncclAlltoAll(in.data_ptr(), out.data_ptr(), bytesOf(in) / n, ncclUint8, c, st);
                   },
                   s.copyBack});
  }
  // Uneven: splits count rows of dimension 0; each pair is a send and a receive.
  auto offsets = [n](const at::Tensor& t, const std::vector<int64_t>& splits, const char* side) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const size_t rowBytes = rows == 0 ? 0 : bytesOf(t) / static_cast<size_t>(rows);
    std::vector<int64_t> split = splits;
    if (split.empty()) {
      TORCH_CHECK(rows % n == 0, "plait: all_to_all_single: ", side, " has ", rows, " rows, not a multiple of ", n);
      split.assign(n, rows / n);
    }
    TORCH_CHECK(static_cast<int>(split.size()) == n, "plait: all_to_all_single: ", side, " splits have ",
                split.size(), " entries for ", n, " ranks");
    std::vector<std::pair<size_t, size_t>> spans;  // byte offset, byte count
    int64_t at = 0;
    for (int64_t k : split) {
      TORCH_CHECK(k >= 0, "plait: all_to_all_single: a negative split (", k, ")");
      spans.emplace_back(static_cast<size_t>(at) * rowBytes, static_cast<size_t>(k) * rowBytes);
      at += k;
    }
    TORCH_CHECK(at == rows, "plait: all_to_all_single: ", side, " splits add up to ", at, " rows; the tensor has ",
                rows);
    return spans;
  };
  auto sendSpans = offsets(in, inputSplits, "input");
  auto recvSpans = offsets(out, outputSplits, "output");
  return submit(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {output}, {in}, opts.timeout, opts.asyncOp,
                {[in, out, sendSpans, recvSpans, n](ncclComm_t c, cudaStream_t st) {
                   auto* src = static_cast<const char*>(in.data_ptr());
                   auto* dst = static_cast<char*>(out.data_ptr());
                   ncclResult_t r = ncclGroupStart();
                   for (int p = 0; p < n && r == ncclSuccess; ++p) {
                     r = ncclSend(src + sendSpans[p].first, sendSpans[p].second, ncclUint8, p, c, st);
                     if (r == ncclSuccess)
                       r = ncclRecv(dst + recvSpans[p].first, recvSpans[p].second, ncclUint8, p, c, st);
                   }
                   const ncclResult_t end = ncclGroupEnd();
                   return r != ncclSuccess ? r : end;
                 },
                 s.copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              "plait: all_to_all: the input and output lists must hold ", size_, " tensors each");
  std::vector<at::Tensor> ins, outs;
  std::function<void()> copyBack;
  for (int p = 0; p < size_; ++p) {
    checkTensor(inputs[p], "all_to_all");
    checkTensor(outputs[p], "all_to_all");
    TORCH_CHECK(inputs[p].scalar_type() == outputs[p].scalar_type(), "plait: all_to_all: tensors of different types");
    ins.push_back(inputs[p].contiguous());
    Staged s = stageOutput(outputs[p], /*keepContents=*/false);
    outs.push_back(s.buffer);
    copyBack = chain(std::move(copyBack), std::move(s.copyBack));
  }
  return submit(c10d::OpType::ALLTOALL, "all_to_all", outputs, ins, opts.timeout, opts.asyncOp,
                {[ins, outs](ncclComm_t c, cudaStream_t st) {
                   ncclResult_t r = ncclGroupStart();
                   for (size_t p = 0; p < ins.size() && r == ncclSuccess; ++p) {
                     r = ncclSend(ins[p].data_ptr(), bytesOf(ins[p]), ncclUint8, static_cast<int>(p), c, st);
                     if (r == ncclSuccess)
                       r = ncclRecv(outs[p].data_ptr(), bytesOf(outs[p]), ncclUint8, static_cast<int>(p), c, st);
                   }
                   const ncclResult_t end = ncclGroupEnd();
                   return r != ncclSuccess ? r : end;
                 },
                 copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::send(std::vector<at::Tensor>& tensors, int dstRank, int /*tag*/) {
  checkSingle(tensors, "send");
  TORCH_CHECK(dstRank >= 0 && dstRank < size_ && dstRank != rank_, "plait: send: destination ", dstRank,
              " is not another rank of this group of ", size_);
  at::Tensor in = tensors[0].contiguous();
  return submit(c10d::OpType::SEND, "send", tensors, {in}, c10d::kUnsetTimeout, /*async=*/true,
                {[in, dstRank](ncclComm_t c, cudaStream_t st) {
                   return ncclSend(in.data_ptr(), bytesOf(in), ncclUint8, dstRank, c, st);
                 },
                 nullptr});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::recv(std::vector<at::Tensor>& tensors, int srcRank, int /*tag*/) {
  checkSingle(tensors, "recv");
  TORCH_CHECK(srcRank >= 0 && srcRank < size_ && srcRank != rank_, "plait: recv: source ", srcRank,
              " is not another rank of this group of ", size_);
  Staged s = stageOutput(tensors[0], /*keepContents=*/false);
  at::Tensor out = s.buffer;
  return submit(c10d::OpType::RECV, "recv", tensors, {}, c10d::kUnsetTimeout, /*async=*/true,
                {[out, srcRank](ncclComm_t c, cudaStream_t st) {
                   return ncclRecv(out.data_ptr(), bytesOf(out), ncclUint8, srcRank, c, st);
                 },
                 s.copyBack});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupPlait::barrier(const c10d::BarrierOptions& opts) {
  at::Tensor token = at::zeros({1}, at::TensorOptions().dtype(at::kByte));
  return submit(c10d::OpType::BARRIER, "barrier", {}, {}, opts.timeout, opts.asyncOp,
                {[token](ncclComm_t c, cudaStream_t st) {
                   return ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclUint8, ncclSum, c, st);
                 },
                 nullptr});
}

}  // namespace plait_torch
