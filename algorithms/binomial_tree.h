// binomial_tree.h — Broadcast and Reduce over a binomial tree rooted at the
// root: ceil(log2 n) hops deep where the ring's chain is n-1, pipelined slice
// by slice like the chain.
//
// Ranks are numbered relative to the root (v = (rank - root) mod n). The
// parent of v > 0 is v with its highest set bit cleared; the children of v
// are v + 2^j for every 2^j above v's highest bit with v + 2^j < n. So the
// root's children are 1, 2, 4, ..., and the subtree under v + 2^j has at most
// 2^j ranks.
//  * Broadcast: per slice, a rank receives from its parent (writing its
//    output and its first child's FIFO in one pass) and sends the slice on to
//    its other children, largest subtree first.
//  * Reduce: per slice, a rank folds its children's partial sums into its own
//    input, smallest subtree first (it is ready first), and sends the result
//    to its parent; the root writes its output. The order is fixed by the
//    tree, so results do not vary from run to run.
// Each edge carries the whole buffer once; a rank with k children moves k
// copies of it, so the root of a large tree is the bottleneck for large
// buffers: the tuner picks the tree where hops, not bytes, dominate.
//
// `Links` is halving_doubling.h's: prims(slot, recvFrom, sendTo, srcScaled).
#pragma once

#include <cstddef>

#include "algorithms/portability.h"

namespace plait {

struct BinomialTreeArgs {
  const char* input = nullptr;
  char* output = nullptr;   // Broadcast: every rank's; Reduce: the root's
  char* scratch = nullptr;  // Reduce: sliceElems elements (ranks with 2+ children, off the root)
  size_t count = 0;
  size_t elemSize = 1;
  int nranks = 1;
  int rank = 0;
  int root = 0;
  size_t sliceElems = 1;
  bool inPlace = false;     // Broadcast root: input == output
};

namespace tree {

PLAIT_HOST_DEVICE inline int highestBit(int v) {
  int b = 1;
  while (b * 2 <= v) b *= 2;
  return v == 0 ? 0 : b;
}
PLAIT_HOST_DEVICE inline int parentOf(int v) { return v - highestBit(v); }
// The smallest child's step (2^j) of v: children are v + step, v + 2 step, ...
PLAIT_HOST_DEVICE inline int firstChildStep(int v) { return v == 0 ? 1 : highestBit(v) * 2; }
PLAIT_HOST_DEVICE inline int childCount(int v, int n) {
  int k = 0;
  for (int s = firstChildStep(v); v + s < n; s *= 2) ++k;
  return k;
}
// Child i of v, smallest subtree first (i = 0: v + firstChildStep).
PLAIT_HOST_DEVICE inline int childOf(int v, int i) { return v + (firstChildStep(v) << i); }
PLAIT_HOST_DEVICE inline int toRank(int v, int root, int n) { return (v + root) % n; }

// A rank's place in the tree: its number relative to the root, its child
// count and its parent's rank (-1 at the root).
struct Node {
  int v = 0, children = 0, parent = -1;
};
PLAIT_HOST_DEVICE inline Node nodeOf(const BinomialTreeArgs& a) {
  Node node;
  node.v = (a.rank - a.root + a.nranks) % a.nranks;
  node.children = childCount(node.v, a.nranks);
  node.parent = node.v == 0 ? -1 : toRank(parentOf(node.v), a.root, a.nranks);
  return node;
}

}  // namespace tree

template <class Links>
PLAIT_HOST_DEVICE bool binomialBroadcast(Links& links, const BinomialTreeArgs& a) {
  const int n = a.nranks;
  const tree::Node node = tree::nodeOf(a);
  const int v = node.v, k = node.children, parent = node.parent;
  // Slot i + 1 sends to child i (largest subtree first: i = k-1 .. 0); slot 0
  // receives from the parent and feeds the largest child in the same pass.
  const int first = k > 0 ? tree::toRank(tree::childOf(v, k - 1), a.root, n) : -1;
  auto& head = links.prims(0, parent, first, true);
  for (size_t off = 0; off < a.count; off += a.sliceElems) {
    const size_t m = a.count - off < a.sliceElems ? a.count - off : a.sliceElems;
    const size_t b = off * a.elemSize;
    bool ok;
    if (v != 0) ok = first < 0 ? head.recv(a.output + b, m) : head.recvCopySend(a.output + b, m);
    else ok = a.inPlace ? head.send(a.input + b, m) : head.copySend(a.input + b, a.output + b, m);
    const char* from = v == 0 ? a.input : a.output;
    for (int i = k - 2; ok && i >= 0; --i)
      ok = links.prims(i + 1, -1, tree::toRank(tree::childOf(v, i), a.root, n), true).send(from + b, m);
    if (!ok) return false;
  }
  return true;
}

template <class Links>
PLAIT_HOST_DEVICE bool binomialReduce(Links& links, const BinomialTreeArgs& a) {
  const int n = a.nranks;
  const tree::Node node = tree::nodeOf(a);
  const int v = node.v, k = node.children, parent = node.parent;
  for (size_t off = 0; off < a.count; off += a.sliceElems) {
    const size_t m = a.count - off < a.sliceElems ? a.count - off : a.sliceElems;
    const size_t b = off * a.elemSize;
    if (k == 0) {  // a leaf (never the root: n >= 2)
      if (!links.prims(0, -1, parent, false).send(a.input + b, m)) return false;
      continue;
    }
    // acc holds op(input, children so far), scaled; the root folds into its output.
    char* acc = v == 0 ? a.output + b : a.scratch;
    const char* src = a.input + b;
    bool scaled = false;
    for (int i = 0; i < k; ++i) {
      const int child = tree::toRank(tree::childOf(v, i), a.root, n);
      const bool last = i == k - 1;
      bool ok;
      if (last && v != 0) ok = links.prims(i, child, parent, scaled).recvReduceSend(src, m);
      else ok = links.prims(i, child, -1, scaled).recvReduceCopy(src, acc, m, /*postOp=*/last);
      if (!ok) return false;
      src = acc;
      scaled = true;
    }
  }
  return true;
}

}  // namespace plait
