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
    if (!seg.isOk()) {
      // Every rank keeps its board's name until the barrier below, so a
      // missing one means its owner already left initialisation (it failed
      // and cleaned up, or was killed and its segment swept): a remote
      // failure, which init completes with the names of the dead.
      if (!SharedSegment::exists(name))
        return Status(Code::kRemoteError, "rank " + std::to_string(peer) + " (pid " +
                                              std::to_string(bootstrap.peer(peer).pid) +
                                              ") removed its operation board before every rank had mapped it: it "
                                              "left initialisation (failed, aborted or died)");
      return seg.takeStatus().withContext("mapping the operation board of rank " + std::to_string(peer));
    }
    board->peers_.push_back(std::move(seg).value());
    board->peerLines_.emplace_back(peer, static_cast<const Line*>(board->peers_.back().data()));
  }
  PLAIT_RETURN_IF_ERROR(bootstrap.barrier(deadline));  // everybody mapped: the names can go
  if (alone) return std::unique_ptr<OpBoard>();
  PLAIT_RETURN_IF_ERROR(board->own_.unlink());
  return board;
}

void OpBoard::write(Line& line, uint64_t seq, const Task& task) {
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

void OpBoard::writeBatch(Line& line, uint64_t seq) {
  const uint64_t v = line.version.load(std::memory_order_relaxed);
  line.version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  line.seq.store(seq, std::memory_order_relaxed);
  line.coll.store(kBatch, std::memory_order_relaxed);
  line.version.store(v + 2, std::memory_order_release);
}

void OpBoard::publish(uint64_t seq, const Task& task) { write(*static_cast<Line*>(own_.data()), seq, task); }

void OpBoard::publishBatch(uint64_t seq) { writeBatch(*static_cast<Line*>(own_.data()), seq); }

void OpBoard::noteRegistration(uint64_t seq) {
  auto& first = static_cast<Line*>(own_.data())->firstRegistration;
  if (first.load(std::memory_order_relaxed) == kNever) first.store(seq, std::memory_order_relaxed);
}

int OpBoard::firstBehind(uint64_t seq) const {
  for (const auto& [peer, line] : peerLines_)
    if (line->seq.load(std::memory_order_relaxed) < seq) return peer;
  // Pairs with write()'s release fence: a registration noted before a peer
  // announced the number just read is visible to anyRegisteredBy().
  std::atomic_thread_fence(std::memory_order_acquire);
  return -1;
}

uint64_t OpBoard::seqOf(int rank) const {
  for (const auto& [peer, line] : peerLines_)
    if (peer == rank) return line->seq.load(std::memory_order_relaxed);
  return 0;
}

bool OpBoard::anyRegisteredBy(uint64_t seq) const {
  if (static_cast<const Line*>(own_.data())->firstRegistration.load(std::memory_order_relaxed) <= seq) return true;
  for (const auto& [peer, line] : peerLines_)
    if (line->firstRegistration.load(std::memory_order_relaxed) <= seq) return true;
  return false;
}

void OpBoard::markDeparted() {
  static_cast<Line*>(own_.data())->departed.store(1, std::memory_order_release);
}

bool OpBoard::peerDeparted(int rank) const {
  for (const auto& [peer, line] : peerLines_)
    if (peer == rank) return line->departed.load(std::memory_order_acquire) != 0;
  return false;
}

bool OpBoard::read(const Line& line, OpRecord* out) {
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

bool OpRecord::isBatch() const { return coll == kBatch; }

std::string OpRecord::describe() const {
  if (seq == 0) return "before its first collective";
  if (isBatch()) return "in a group of point-to-point operations (through collective #" + std::to_string(seq) + ")";
  const auto c = static_cast<CollType>(coll);
  std::string text = std::string(collName(c)) + " #" + std::to_string(seq) + " (count " + std::to_string(count) +
                     ", " + typeName(static_cast<ncclDataType_t>(type));
  if (reduces(c)) text += std::string(", ") + opKindName(opKind);
  if (rooted(c)) text += ", root " + std::to_string(root);
  return text + ")";
}

std::string OpBoard::positionText(const Line& line) {
  if (line.departed.load(std::memory_order_acquire) != 0) return "gone (aborted or destroyed its communicator)";
  OpRecord r;
  if (!read(line, &r)) return "changing its operation";
  return r.describe();
}

std::vector<RankPosition> OpBoard::positions() const {
  std::vector<RankPosition> out;
  auto add = [&](int rank, const Line& line) {
    OpRecord r;
    read(line, &r);  // the number orders the report only; the text is read again
    out.push_back(RankPosition{rank, r.seq, positionText(line)});
  };
  add(rank_, *static_cast<const Line*>(own_.data()));
  for (const auto& [peer, line] : peerLines_) add(peer, *line);
  return out;
}

std::string formatPositions(std::vector<RankPosition> positions, int self, const std::function<std::string(int)>& who) {
  std::sort(positions.begin(), positions.end(), [](const RankPosition& a, const RankPosition& b) {
    return a.seq != b.seq ? a.seq > b.seq : a.rank < b.rank;  // the furthest first
  });
  std::vector<std::pair<std::string, std::vector<int>>> groups;  // in order of first appearance
  for (const RankPosition& p : positions) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == p.text; });
    if (it == groups.end()) groups.push_back({p.text, {p.rank}});
    else it->second.push_back(p.rank);
  }
  std::string out;
  for (auto& [text, ranks] : groups) {
    std::sort(ranks.begin(), ranks.end());
    const bool mine = std::find(ranks.begin(), ranks.end(), self) != ranks.end();
    std::string list = ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size(); ++i) {
      list += (i ? ", " : "") + std::to_string(ranks[i]);
      if (ranks[i] == self) list += " (this one)";
      else if (!mine && i < 8 && who) list += who(ranks[i]);
    }
    const bool at = text.find('#') != std::string::npos && text.find("group") == std::string::npos;
    out += (out.empty() ? "" : "; ") + list + (ranks.size() == 1 ? " is " : " are ") + (at ? "at " : "") + text;
  }
  return out;
}

Status OpBoard::check() const {
  OpRecord mine;  // only this rank's thread writes it, but a worker may read it mid-write
  if (!read(*static_cast<const Line*>(own_.data()), &mine) || mine.seq == 0) return Status::ok();
  for (const auto& [peer, line] : peerLines_) {
    OpRecord theirs;
    if (!read(*line, &theirs) || theirs.seq != mine.seq || theirs == mine) continue;
    if (theirs.isBatch() || mine.isBatch()) continue;
    return invalidUsage("ranks disagree on collective #" + std::to_string(mine.seq) + ": rank " +
                        std::to_string(peer) + " runs " + theirs.describe() + " but rank " + std::to_string(rank_) +
                        " runs " + mine.describe() + " (every rank must call the same collectives in the same order " +
                        "with the same count, type, op and root)");
  }
  return Status::ok();
}

}  // namespace plait
