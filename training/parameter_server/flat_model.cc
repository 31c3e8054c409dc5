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

Result<JobShape> jobShape(const ModelConfig& model, uint64_t seed, int servers, ncclComm_t comm,
                          const std::string& algorithm, const std::function<Status(int nranks)>& check) {
  JobShape job;
  if (ncclCommCount(comm, &job.nranks) != ncclSuccess || ncclCommUserRank(comm, &job.rank) != ncclSuccess)
    return invalidArgument(algorithm + ": the communicator: " + ncclGetLastError(comm));
  PLAIT_RETURN_IF_ERROR(check(job.nranks));
  job.params = FlatModel(model, seed).numel();
  if (job.params < size_t(servers))
    return invalidArgument(algorithm + ": " + std::to_string(servers) + " servers for " +
                           std::to_string(job.params) + " parameters");
  return job;
}

}  // namespace plait::training::ps
