// reduce_ops.h — the reduction operators, per element type, for the host
// and the device.
//
// A functor works on an element's accumulation type Acc: float for the 16-bit
// and fp8 formats (convert, apply, round back: what NCCL does), the element
// type itself otherwise. Every functor has the same shape, so kernels are
// written once:
//
//   Acc reduce(Acc a, Acc b)  the binary operator
//   Acc preOp(Acc x)          applied to an input before reducing (PreMulSum:
//                             x * scalar, rounded to the element type, so the
//                             result does not depend on where the pre-op ran)
//   Acc postOp(Acc x)         applied to the final result (SumPostDiv: x / n)
//   kHasPreOp / kHasPostOp    whether preOp / postOp are more than identity
//
// Semantics:
//   * Integer Sum, Prod and PreMulSum wrap modulo 2^bits (computed unsigned:
//     no undefined behaviour). SumPostDiv divides the wrapped sum by n,
//     truncating toward zero (as C and NCCL do).
//   * Floating Max/Min ignore a NaN operand unless both are NaN (fmax/fmin,
//     what NCCL's device max/min do). Which zero max(-0, +0) returns is
//     unspecified.
//   * ncclAvg is PreMulSum(1/nranks) on each input for floating types and
//     SumPostDiv(nranks) for integers (see makeRedOp in reduce.h).
#pragma once

#include <cstdint>
#include <type_traits>

#include "algorithms/portability.h"
#include "algorithms/types.h"

namespace plait {

enum class RedOpKind : uint8_t { kSum, kProd, kMax, kMin, kPreMulSum, kSumPostDiv };
constexpr int kNumRedOpKinds = 6;

// A resolved reduction: plain data, copyable to a GPU.
struct RedOp {
  RedOpKind kind = RedOpKind::kSum;
  // PreMulSum: the scalar's bits in the element type (low bytes).
  // SumPostDiv: the divisor (nranks).
  uint64_t scalar = 0;
};

// ---- element <-> accumulation type ----------------------------------------

// load/store convert between an element and its accumulator. Storage is a
// scalar with the element's bits: kernels read and write memory as Storage
// (loadBits/storeBits), because GCC does not vectorize loops that copy
// structs element by element.
template <class T> struct EltTraits {
  static_assert(std::is_arithmetic_v<T>, "no EltTraits for this type");
  using Acc = T;
  using Storage = T;
  PLAIT_HOST_DEVICE PLAIT_INLINE static Acc load(T x) { return x; }
  PLAIT_HOST_DEVICE PLAIT_INLINE static T store(Acc x) { return x; }
  PLAIT_HOST_DEVICE PLAIT_INLINE static Acc loadBits(Storage x) { return x; }
  PLAIT_HOST_DEVICE PLAIT_INLINE static Storage storeBits(Acc x) { return x; }
};

template <class T> struct SmallFloatEltTraits {
  using Acc = float;
  using Storage = decltype(T::bits);
  PLAIT_HOST_DEVICE PLAIT_INLINE static Acc load(T x) { return x.toFloat(); }
  PLAIT_HOST_DEVICE PLAIT_INLINE static T store(Acc x) { return T::fromFloat(x); }
  PLAIT_HOST_DEVICE PLAIT_INLINE static Acc loadBits(Storage x) { return T{x}.toFloat(); }
  PLAIT_HOST_DEVICE PLAIT_INLINE static Storage storeBits(Acc x) { return T::fromFloat(x).bits; }
};
template <> struct EltTraits<Half> : SmallFloatEltTraits<Half> {};
template <> struct EltTraits<BFloat16> : SmallFloatEltTraits<BFloat16> {};
template <> struct EltTraits<Fp8E4M3> : SmallFloatEltTraits<Fp8E4M3> {};
template <> struct EltTraits<Fp8E5M2> : SmallFloatEltTraits<Fp8E5M2> {};

template <class T> using AccOf = typename EltTraits<T>::Acc;

// Rounds an accumulator value to what the element type can hold.
template <class T>
PLAIT_HOST_DEVICE PLAIT_INLINE AccOf<T> roundToElt(AccOf<T> x) {
  return EltTraits<T>::load(EltTraits<T>::store(x));
}

namespace detail {

template <class T> constexpr bool kIsInt = std::is_integral_v<T>;

// Wrapping integer arithmetic; plain arithmetic for floating types.
template <class A>
PLAIT_HOST_DEVICE PLAIT_INLINE A add(A a, A b) {
  if constexpr (kIsInt<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <class A>
PLAIT_HOST_DEVICE PLAIT_INLINE A mul(A a, A b) {
  if constexpr (kIsInt<A>) {
    // 8-bit operands promote to int, where 255*255 cannot overflow; wider
    // ones stay unsigned.
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}
template <class A>
PLAIT_HOST_DEVICE PLAIT_INLINE A max(A a, A b) {
  if constexpr (kIsInt<A>) {
    return a > b ? a : b;
  } else {
    return ((a > b) | (b != b)) ? a : b;  // NaN-ignoring, branch-free
  }
}
template <class A>
PLAIT_HOST_DEVICE PLAIT_INLINE A min(A a, A b) {
  if constexpr (kIsInt<A>) {
    return a < b ? a : b;
  } else {
    return ((a < b) | (b != b)) ? a : b;
  }
}

// The element value whose bits are the low bytes of `bits`.
template <class T>
PLAIT_HOST_DEVICE PLAIT_INLINE T eltFromBits(uint64_t bits) {
  T x;
  __builtin_memcpy(&x, &bits, sizeof(T));  // little-endian: the low bytes
  return x;
}

}  // namespace detail

// The identity pre/post operations, shared by the plain operators.
template <class T> struct FuncBase {
  using Elt = T;
  using Acc = AccOf<T>;
  static constexpr bool kHasPreOp = false;
  static constexpr bool kHasPostOp = false;
  PLAIT_HOST_DEVICE PLAIT_INLINE Acc preOp(Acc x) const { return x; }
  PLAIT_HOST_DEVICE PLAIT_INLINE Acc postOp(Acc x) const { return x; }
};

template <class T> struct FuncSum : FuncBase<T> {
  using Acc = AccOf<T>;
  PLAIT_HOST_DEVICE explicit FuncSum(const RedOp& = {}) {}
  PLAIT_HOST_DEVICE PLAIT_INLINE Acc reduce(Acc a, Acc b) const { return detail::add(a, b); }
};

template <class T> struct FuncProd : FuncBase<T> {
  using Acc = AccOf<T>;
  PLAIT_HOST_DEVICE explicit FuncProd(const RedOp& = {}) {}
  PLAIT_HOST_DEVICE PLAIT_INLINE Acc reduce(Acc a, Acc b) const { return detail::mul(a, b); }
};

template <class T> struct FuncMax : FuncBase<T> {
  using Acc = AccOf<T>;
  PLAIT_HOST_DEVICE explicit FuncMax(const RedOp& = {}) {}
  PLAIT_HOST_DEVICE PLAIT_INLINE Acc reduce(Acc a, Acc b) const { return detail::max(a, b); }
};

template <class T> struct FuncMin : FuncBase<T> {
  using Acc = AccOf<T>;
  PLAIT_HOST_DEVICE explicit FuncMin(const RedOp& = {}) {}
  PLAIT_HOST_DEVICE PLAIT_INLINE Acc reduce(Acc a, Acc b) const { return detail::min(a, b); }
};

// Sum of inputs each multiplied by a scalar first (ncclRedOpCreatePreMulSum,
// and ncclAvg for floating types). The product is rounded to the element
// type: a rank's scaled input travels as an element, so fusing the scaling
// into a reduction must give the same bits.
template <class T> struct FuncPreMulSum : FuncBase<T> {
  using Acc = AccOf<T>;
  static constexpr bool kHasPreOp = true;
  Acc scalar_;
  PLAIT_HOST_DEVICE explicit FuncPreMulSum(const RedOp& op)
      : scalar_(EltTraits<T>::load(detail::eltFromBits<T>(op.scalar))) {}
  PLAIT_HOST_DEVICE PLAIT_INLINE Acc reduce(Acc a, Acc b) const { return detail::add(a, b); }
  PLAIT_HOST_DEVICE PLAIT_INLINE Acc preOp(Acc x) const {
    return roundToElt<T>(detail::mul(x, scalar_));
  }
};

// Sum, then divide the final result by the divisor (ncclAvg for integers).
// Floating types divide in their accumulation type. A divisor of 0 is
// treated as 1.
template <class T> struct FuncSumPostDiv : FuncBase<T> {
  using Acc = AccOf<T>;
  static constexpr bool kHasPostOp = true;
  // Signed types divide as int64 (truncating toward zero), unsigned as
  // uint64, so an 8-bit element can be divided by any rank count.
  using Div = std::conditional_t<std::is_integral_v<T>,
                                 std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>, Acc>;
  Div divisor_;
  PLAIT_HOST_DEVICE explicit FuncSumPostDiv(const RedOp& op)
      : divisor_(static_cast<Div>(op.scalar == 0 ? 1 : op.scalar)) {}
  PLAIT_HOST_DEVICE PLAIT_INLINE Acc reduce(Acc a, Acc b) const { return detail::add(a, b); }
  PLAIT_HOST_DEVICE PLAIT_INLINE Acc postOp(Acc x) const {
    return static_cast<Acc>(static_cast<Div>(x) / divisor_);
  }
};

// FuncFor<kKind, T> is the functor for a RedOpKind.
template <RedOpKind kKind, class T> struct FuncForImpl;
template <class T> struct FuncForImpl<RedOpKind::kSum, T> { using type = FuncSum<T>; };
template <class T> struct FuncForImpl<RedOpKind::kProd, T> { using type = FuncProd<T>; };
template <class T> struct FuncForImpl<RedOpKind::kMax, T> { using type = FuncMax<T>; };
template <class T> struct FuncForImpl<RedOpKind::kMin, T> { using type = FuncMin<T>; };
template <class T> struct FuncForImpl<RedOpKind::kPreMulSum, T> { using type = FuncPreMulSum<T>; };
template <class T> struct FuncForImpl<RedOpKind::kSumPostDiv, T> { using type = FuncSumPostDiv<T>; };
template <RedOpKind kKind, class T> using FuncFor = typename FuncForImpl<kKind, T>::type;

// One element of a two-input reduction with optional pre/post operations:
// what every kernel computes per element, written out once.
template <class Fn>
PLAIT_HOST_DEVICE PLAIT_INLINE typename Fn::Elt reduceElt(const Fn& fn, typename Fn::Elt a,
                                                          typename Fn::Elt b, bool preA = false,
                                                          bool preB = false, bool post = false) {
  using Traits = EltTraits<typename Fn::Elt>;
  auto x = Traits::load(a);
  auto y = Traits::load(b);
  if (preA) x = fn.preOp(x);
  if (preB) y = fn.preOp(y);
  auto r = fn.reduce(x, y);
  if (post) r = fn.postOp(r);
  return Traits::store(r);
}

}  // namespace plait
