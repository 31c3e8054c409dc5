// connect_stages.h — the connector state a network module keeps between
// calls of its connect(), found again through the handle.
//
// NCCL's plugin contract has connect() called again with the same handle
// until it returns a comm, so modules keep a pointer to their progress in the
// handle's bytes. Those bytes are a copy of what the listening peer sent
// through the bootstrap: a pointer found there is this process's own only if
// this process put it there. A Registry remembers the stages it handed out,
// and a module follows a handle's pointer only once the registry knows it
// (and the stage's own check says it belongs to this handle): a peer's
// handle arrives with it null, anything else is refused, never followed.
#pragma once

#include <algorithm>
#include <mutex>
#include <vector>

namespace plait::net {

template <typename Stage>
class StageRegistry {
 public:
  // Remembers `stage` (made by new); returns it.
  Stage* adopt(Stage* stage) {
    std::lock_guard<std::mutex> lock(mu_);
    stages_.push_back(stage);
    return stage;
  }
  // Whether `stage` is one this registry handed out and still holds, and
  // `belongs(*stage)` (read only once it is known to be ours).
  template <typename Pred>
  bool owns(const void* stage, Pred belongs) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find(stages_.begin(), stages_.end(), stage);
    return it != stages_.end() && belongs(**it);
  }
  // Forgets and deletes `stage`.
  void drop(Stage* stage) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stages_.erase(std::remove(stages_.begin(), stages_.end(), stage), stages_.end());
    }
    delete stage;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Stage*> stages_;
};

}  // namespace plait::net
