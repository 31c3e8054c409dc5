// BatchNorm and SyncBN: the backward against finite differences (in double,
// with the statistics summed over shards as SyncBN's all-reduces do), SyncBN
// over N thread ranks against plain BatchNorm over the whole batch, and DDP
// with SyncBN against serial training.
//
// Tolerances: the double check uses h = 1e-6 (error ~1e-10, see
// test_layers.cc) against 1e-7. The float comparisons differ only in the order
// of the per-channel sums (per rank, then across ranks, versus one loop): a
// few ulps of the sums, ~1e-6 relative after the 1/√var; 1e-5 leaves room and
// still catches a missing all-reduce, which changes outputs by O(1) (checked:
// unsynchronised per-shard BatchNorm is far off).
#include <catch2/catch.hpp>

#include <functional>

#include "reference.h"
#include "training/batch_norm.h"
#include "training/strategies.h"

using namespace plait::training;
using plait_test::maxRelDiff;

namespace {

std::vector<double> randomVec(size_t n, uint64_t key, double scale = 1.0, double shift = 0.0) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = shift + scale * normalAt(43, key, i);
  return v;
}

// SyncBN's arithmetic over shards of rows (sizes `rows`) in double: the
// all-reduces are sums of the shards' partial sums. Returns y; with dy given,
// also dx, dgamma, dbeta.
struct ShardedBn {
  ShardedBn(std::vector<int> r, int c) : rows(std::move(r)), C(c) {}
  std::vector<int> rows;
  int C;
  std::vector<double> forward(const std::vector<double>& x, const std::vector<double>& gamma,
                              const std::vector<double>& beta) {
    const int M = total();
    std::vector<double> part(C), sum(C, 0.0), dev(C, 0.0);
    for (int s = 0, off = 0; s < int(rows.size()); off += rows[s++]) {
      columnSums(rows[s], C, x.data() + size_t(off) * C, part.data());
      for (int c = 0; c < C; ++c) sum[c] += part[c];
    }
    mean.assign(C, 0.0);
    for (int c = 0; c < C; ++c) mean[c] = sum[c] / M;
    for (int s = 0, off = 0; s < int(rows.size()); off += rows[s++]) {
      columnSquaredDeviations(rows[s], C, x.data() + size_t(off) * C, mean.data(), part.data());
      for (int c = 0; c < C; ++c) dev[c] += part[c];
    }
    rstd.assign(C, 0.0);
    for (int c = 0; c < C; ++c) rstd[c] = 1.0 / std::sqrt(dev[c] / M + 1e-5);
    std::vector<double> y(x.size());
    batchNormApply(M, C, x.data(), mean.data(), rstd.data(), gamma.data(), beta.data(), y.data());
    return y;
  }
  void backward(const std::vector<double>& x, const std::vector<double>& gamma, const std::vector<double>& dy,
                std::vector<double>& dx, std::vector<double>& dgamma, std::vector<double>& dbeta) {
    std::vector<double> sDy(C, 0.0), sDx(C, 0.0), pDy(C), pDx(C);
    dgamma.assign(C, 0.0);
    dbeta.assign(C, 0.0);
    for (int s = 0, off = 0; s < int(rows.size()); off += rows[s++]) {
      batchNormBackwardSums(rows[s], C, x.data() + size_t(off) * C, mean.data(), rstd.data(),
                            dy.data() + size_t(off) * C, pDy.data(), pDx.data());
      for (int c = 0; c < C; ++c) sDy[c] += pDy[c], sDx[c] += pDx[c], dbeta[c] += pDy[c], dgamma[c] += pDx[c];
    }
    dx.assign(x.size(), 0.0);
    for (int s = 0, off = 0; s < int(rows.size()); off += rows[s++])
      batchNormBackwardApply(rows[s], C, x.data() + size_t(off) * C, mean.data(), rstd.data(), gamma.data(),
                             dy.data() + size_t(off) * C, sDy.data(), sDx.data(), double(total()),
                             dx.data() + size_t(off) * C);
  }
  int total() const {
    int m = 0;
    for (int r : rows) m += r;
    return m;
  }
  std::vector<double> mean, rstd;
};

double maxGradError(std::vector<double>& x, const std::vector<double>& analytic, const std::function<double()>& f) {
  const double h = 1e-6;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double keep = x[i];
    x[i] = keep + h;
    double up = f();
    x[i] = keep - h;
    double down = f();
    x[i] = keep;
    double numeric = (up - down) / (2 * h);
    worst = std::max(worst, std::abs(analytic[i] - numeric) / std::max(1.0, std::abs(numeric)));
  }
  return worst;
}

std::vector<float> toFloat(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

}  // namespace

TEST_CASE("SyncBN backward (statistics over shards) matches finite differences in double", "[training][bn]") {
  const int C = 3;
  ShardedBn bn({2, 3, 1}, C);  // uneven shards: the count must be the global one
  const int M = bn.total();
  auto x = randomVec(size_t(M) * C, 1, 2.0, 0.5), gamma = randomVec(C, 2, 0.5, 1.0), beta = randomVec(C, 3),
       r = randomVec(size_t(M) * C, 4);
  auto f = [&] {
    auto y = bn.forward(x, gamma, beta);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
    return s;
  };
  f();
  std::vector<double> dx, dgamma, dbeta;
  bn.backward(x, gamma, r, dx, dgamma, dbeta);
  CHECK(maxGradError(x, dx, f) < 1e-7);
  CHECK(maxGradError(gamma, dgamma, f) < 1e-7);
  CHECK(maxGradError(beta, dbeta, f) < 1e-7);
}

TEST_CASE("SyncBN over N ranks equals BatchNorm over the whole batch", "[training][bn]") {
  const int C = 5, B = 12;
  const auto x = toFloat(randomVec(size_t(B) * C, 5, 3.0, 1.0)), dy = toFloat(randomVec(size_t(B) * C, 6));
  // The whole batch, one layer, no communicator.
  auto run = [&](BatchNorm& bn, int first, int rows, std::vector<float>& y, std::vector<float>& dx,
                 std::vector<float>& grads) {
    std::vector<float> w = {1.0f, 0.5f, -1.0f, 2.0f, 0.25f, 0.1f, 0.0f, -0.3f, 0.2f, 0.0f}, g(2 * C, 0.0f);
    bn.gamma.w = w.data(), bn.beta.w = w.data() + C, bn.gamma.g = g.data(), bn.beta.g = g.data() + C;
    Tensor in({rows, C}), d({rows, C});
    std::copy_n(x.begin() + size_t(first) * C, size_t(rows) * C, in.data.begin());
    std::copy_n(dy.begin() + size_t(first) * C, size_t(rows) * C, d.data.begin());
    y = bn.forward(in).data;
    dx = bn.backward(d).data;
    grads = g;
  };
  BatchNorm whole(C, {}, "bn");
  std::vector<float> yRef, dxRef, gRef;
  run(whole, 0, B, yRef, dxRef, gRef);
  for (int nranks : {2, 3}) {
    INFO(nranks << " ranks");
    const int per = B / nranks;
    std::vector<float> y(yRef.size()), dx(dxRef.size()), g(gRef.size(), 0.0f), gLocal(gRef.size(), 0.0f);
    std::vector<float> yLocal(yRef.size());
    std::mutex mu;
    auto errors = plait_test::runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      BatchNorm sync(C, DataParallelGroup{comm, nullptr}, "bn"), local(C, {}, "bn");
      std::vector<float> ys, dxs, gs, yl, dxl, gl;
      run(sync, rank * per, per, ys, dxs, gs);
      run(local, rank * per, per, yl, dxl, gl);
      std::lock_guard<std::mutex> lock(mu);
      std::copy(ys.begin(), ys.end(), y.begin() + size_t(rank) * per * C);
      std::copy(dxs.begin(), dxs.end(), dx.begin() + size_t(rank) * per * C);
      std::copy(yl.begin(), yl.end(), yLocal.begin() + size_t(rank) * per * C);
      for (size_t i = 0; i < g.size(); ++i) g[i] += gs[i];  // DDP sums (then scales) these
      return "";
    });
    REQUIRE(errors.empty());
    CHECK(maxRelDiff(y, yRef) < 1e-5);
    CHECK(maxRelDiff(dx, dxRef) < 1e-5);
    CHECK(maxRelDiff(g, gRef) < 1e-5);
    CHECK(maxRelDiff(yLocal, yRef) > 1e-2);  // without the all-reduces the test would notice
  }
}

TEST_CASE("DDP and ZeRO with SyncBN match serial training with BatchNorm", "[training][bn]") {
  for (std::string parallel : {"ddp", "zero2"}) {
    for (int nranks : {2, 3}) {
      INFO(parallel << " on " << nranks << " ranks");
      TrainConfig c;
      c.model.kind = "mlp";
      c.model.batchnorm = true;
      c.parallel = parallel;
      c.localBatch = 4;
      c.seed = 9;
      // SGD: the bias of a Linear right before BatchNorm has a true gradient of
      // 0 (BN removes the mean), so its computed gradient is rounding noise,
      // which Adam's g/√v would blow up to ±lr steps of random sign.
      c.optimizer.kind = "sgd";
      c.optimizer.lr = 0.1f;
      c.firstBucketBytes = 256;  // several buckets: SyncBN's all-reduces interleave with theirs
      c.bucketBytes = 1024;
      auto dist = plait_test::runDistributed(nranks, c, 5, [](const TrainConfig& cfg, ncclComm_t comm) {
        return makeTrainer(cfg, comm);
      });
      REQUIRE(dist.errors.empty());
      TrainConfig s = c;
      s.parallel = "none";
      auto serial = plait_test::runSerial(s, nranks, 5);
      // As in test_ddp.cc: reduction order only.
      CHECK(maxRelDiff(dist.losses, serial.losses) < 1e-5);
      CHECK(maxRelDiff(dist.params[0], serial.params[0]) < 1e-4);
    }
  }
}
