#include "core/task.h"

namespace plait {

const char* collName(CollType coll) {
  switch (coll) {
    case CollType::kAllReduce: return "AllReduce";
    case CollType::kBroadcast: return "Broadcast";
    case CollType::kReduce: return "Reduce";
    case CollType::kAllGather: return "AllGather";
    case CollType::kReduceScatter: return "ReduceScatter";
    case CollType::kAlltoAll: return "AlltoAll";
    case CollType::kGather: return "Gather";
    case CollType::kScatter: return "Scatter";
    case CollType::kSend: return "Send";
    case CollType::kRecv: return "Recv";
  }
  return "Unknown";
}

}  // namespace plait
