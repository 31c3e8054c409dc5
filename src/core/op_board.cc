#include "core/op_board.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <new>

#include "algorithms/types.h"
#include "core/bootstrap.h"

namespace plait {
namespace {

constexpr size_t kNameBytes = 64;
constexpr size_t kSegmentBytes = 4096;
constexpr uint32_t kBatch = 0xffffffffu;  // Line::coll of a group's batch: not compared

const char* opKindName(uint32_t kind) {
  switch (static_cast<RedOpKind>(kind)) {
    case RedOpKind::kSum: return "sum";
    case RedOpKind::kProd: return "prod";
    case RedOpKind::kMax: return "max";
    case RedOpKind::kMin: return "min";
    case RedOpKind::kPreMulSum: return "premulsum";
    case RedOpKind::kSumPostDiv: return "avg";
  }
  return "?";
}

bool rooted(CollType coll) {
  return coll == CollType::kBroadcast || coll == CollType::kReduce || coll == CollType::kGather ||
         coll == CollType::kScatter;
}

bool reduces(CollType coll) {
  return coll == CollType::kAllReduce || coll == CollType::kReduce || coll == CollType::kReduceScatter;
}

}  // namespace

Result<std::unique_ptr<OpBoard>> OpBoard::create(Bootstrap& bootstrap, const std::vector<int>& localRanks,
                                                 Deadline deadline) {
  const int nranks = bootstrap.nranks();
  std::unique_ptr<OpBoard> board(new OpBoard());
  board->rank_ = bootstrap.rank();
  std::vector<char> names(kNameBytes * static_cast<size_t>(nranks), 0);
  const bool alone = localRanks.size() < 2;
  if (!alone) {
    PLAIT_ASSIGN_OR_RETURN(board->own_, SharedSegment::create(kSegmentBytes));
    new (board->own_.data()) Line();
    std::strncpy(&names[kNameBytes * board->rank_], board->own_.name().c_str(), kNameBytes - 1);
  }
  PLAIT_RETURN_IF_ERROR(bootstrap.allGather(names.data(), kNameBytes, deadline));
  for (int peer : localRanks) {
    if (alone || peer == board->rank_) continue;
    const std::string name(&names[kNameBytes * peer], strnlen(&names[kNameBytes * peer], kNameBytes));
    auto seg = SharedSegment::open(name, kSegmentBytes);
    if (!seg.isOk())
      return seg.takeStatus().withContext("mapping the operation board of rank " + std::to_string(peer));
    board->peers_.push_back(std::move(seg).value());
    board->peerLines_.emplace_back(peer, static_cast<const Line*>(board->peers_.back().data()));
  }
  PLAIT_RETURN_IF_ERROR(bootstrap.barrier(deadline));  // everybody mapped: the names can go
  if (alone) return std::unique_ptr<OpBoard>();
  PLAIT_RETURN_IF_ERROR(board->own_.unlink());
  return board;
}

void OpBoard::publish(uint64_t seq, const Task& task) {
  Line& line = *static_cast<Line*>(own_.data());
  const uint64_t v = line.version.load(std::memory_order_relaxed);
  line.version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  line.seq.store(seq, std::memory_order_relaxed);
  line.count.store(task.count, std::memory_order_relaxed);
  line.coll.store(static_cast<uint32_t>(task.coll), std::memory_order_relaxed);
  line.type.store(static_cast<uint32_t>(task.type), std::memory_order_relaxed);
  line.opKind.store(reduces(task.coll) ? static_cast<uint32_t>(task.op.kind) : 0, std::memory_order_relaxed);
  line.root.store(rooted(task.coll) ? task.root : 0, std::memory_order_relaxed);
  line.version.store(v + 2, std::memory_order_release);
}

void OpBoard::publishBatch(uint64_t seq) {
  Line& line = *static_cast<Line*>(own_.data());
  const uint64_t v = line.version.load(std::memory_order_relaxed);
  line.version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  line.seq.store(seq, std::memory_order_relaxed);
  line.coll.store(kBatch, std::memory_order_relaxed);
  line.version.store(v + 2, std::memory_order_release);
}

void OpBoard::markDeparted() {
  static_cast<Line*>(own_.data())->departed.store(1, std::memory_order_release);
}

bool OpBoard::peerDeparted(int rank) const {
  for (const auto& [peer, line] : peerLines_)
    if (peer == rank) return line->departed.load(std::memory_order_acquire) != 0;
  return false;
}

bool OpBoard::read(const Line& line, Snapshot* out) {
  const uint64_t v1 = line.version.load(std::memory_order_acquire);
  if (v1 & 1) return false;
  out->seq = line.seq.load(std::memory_order_relaxed);
  out->count = line.count.load(std::memory_order_relaxed);
  out->coll = line.coll.load(std::memory_order_relaxed);
  out->type = line.type.load(std::memory_order_relaxed);
  out->opKind = line.opKind.load(std::memory_order_relaxed);
  out->root = line.root.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  return line.version.load(std::memory_order_relaxed) == v1;
}

std::string OpBoard::describe(const Snapshot& s) {
  const auto coll = static_cast<CollType>(s.coll);
  std::string text = std::string(collName(coll)) + " #" + std::to_string(s.seq) + " (count " +
                     std::to_string(s.count) + ", " + typeName(static_cast<ncclDataType_t>(s.type));
  if (reduces(coll)) text += std::string(", ") + opKindName(s.opKind);
  if (rooted(coll)) text += ", root " + std::to_string(s.root);
  return text + ")";
}

std::string OpBoard::positions() const {
  // Ranks grouped by what they announced, in rank order within a group.
  std::map<std::string, std::vector<int>> groups;
  std::vector<std::pair<uint64_t, std::string>> order;  // (seq, text): the furthest first
  auto add = [&](int rank, const Line& line) {
    Snapshot s;
    std::string text;
    if (line.departed.load(std::memory_order_acquire) != 0) text = "gone (aborted or destroyed its communicator)";
    else if (!read(line, &s)) text = "changing its operation";
    else if (s.seq == 0) text = "before its first collective";
    else if (s.coll == kBatch) text = "in a group of point-to-point operations (through collective #" +
                                      std::to_string(s.seq) + ")";
    else text = describe(s);
    if (groups[text].empty()) order.emplace_back(s.seq, text);
    groups[text].push_back(rank);
  };
  add(rank_, *static_cast<const Line*>(own_.data()));
  for (const auto& [peer, line] : peerLines_) add(peer, *line);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out;
  for (const auto& [seq, text] : order) {
    std::vector<int>& ranks = groups[text];
    std::sort(ranks.begin(), ranks.end());
    std::string who = ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size(); ++i)
      who += (i ? ", " : "") + std::to_string(ranks[i]) + (ranks[i] == rank_ ? " (this one)" : "");
    out += (out.empty() ? "" : "; ") + who + (ranks.size() == 1 ? " is " : " are ") +
           (text.find('#') != std::string::npos && text.find("group") == std::string::npos ? "at " : "") + text;
  }
  return out;
}

Status OpBoard::check() const {
  Snapshot mine;  // only this rank's thread writes it, but a worker may read it mid-write
  if (!read(*static_cast<const Line*>(own_.data()), &mine) || mine.seq == 0) return Status::ok();
  for (const auto& [peer, line] : peerLines_) {
    Snapshot theirs;
    if (!read(*line, &theirs) || theirs.seq != mine.seq || theirs == mine) continue;
    if (theirs.coll == kBatch || mine.coll == kBatch) continue;
    return invalidUsage("ranks disagree on collective #" + std::to_string(mine.seq) + ": rank " +
                        std::to_string(peer) + " runs " + describe(theirs) + " but rank " + std::to_string(rank_) +
                        " runs " + describe(mine) + " (every rank must call the same collectives in the same order " +
                        "with the same count, type, op and root)");
  }
  return Status::ok();
}

}  // namespace plait
