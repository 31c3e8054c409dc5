#include "training/parameter_server/flat_model.h"

#include <algorithm>

namespace plait::training::ps {

Batch sliceBatch(const Batch& batch, int begin, int end) {
  const int samples = batch.x.shape[0];
  const size_t xPer = batch.x.size() / size_t(samples), lPer = batch.labels.size() / size_t(samples);
  Batch out;
  std::vector<int> shape = batch.x.shape;
  shape[0] = end - begin;
  out.x = Tensor(shape);
  std::copy_n(batch.x.data.begin() + ptrdiff_t(begin * xPer), size_t(end - begin) * xPer, out.x.data.begin());
  out.labels.assign(batch.labels.begin() + ptrdiff_t(begin * lPer), batch.labels.begin() + ptrdiff_t(end * lPer));
  return out;
}

}  // namespace plait::training::ps
