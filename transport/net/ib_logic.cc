// ib_logic.cc — see ib_logic.h. UNVERIFIED ON HARDWARE (unit-tested only).
#include "transport/net/ib_logic.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace plait::ib {

// ---- NCCL_IB_HCA -----------------------------------------------------------

HcaSpec HcaSpec::parse(const std::string& text) {
  HcaSpec spec;
  std::string s = text;
  if (!s.empty() && s[0] == '^') {
    spec.exclude = true;
    s.erase(0, 1);
  }
  if (!s.empty() && s[0] == '=') {
    spec.exact = true;
    s.erase(0, 1);
  }
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty()) {
      Item it;
      size_t colon = item.find(':');
      it.name = item.substr(0, colon);
      if (colon != std::string::npos) it.port = std::atoi(item.c_str() + colon + 1);
      if (!it.name.empty()) spec.items.push_back(it);
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return spec;
}

bool HcaSpec::matches(const std::string& dev, int port) const {
  if (items.empty()) return true;
  bool hit = false;
  for (const Item& it : items) {
    const bool nameOk = exact ? dev == it.name : dev.compare(0, it.name.size(), it.name) == 0;
    if (nameOk && (it.port < 0 || it.port == port)) hit = true;
  }
  return exclude ? !hit : hit;
}

// ---- GID selection ---------------------------------------------------------

bool gidIsZero(const uint8_t raw[16]) {
  return std::all_of(raw, raw + 16, [](uint8_t b) { return b == 0; });
}

bool gidIsV4Mapped(const uint8_t raw[16]) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(raw, prefix, 12) == 0;
}

bool gidIsLinkLocal(const uint8_t raw[16]) { return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80; }

namespace {
bool familyMatches(const GidEntry& g, int family) {
  if (gidIsZero(g.raw)) return false;
  if (family == AF_INET) return gidIsV4Mapped(g.raw);
  return !gidIsV4Mapped(g.raw) && !gidIsLinkLocal(g.raw);
}
}  // namespace

int selectGid(const std::vector<GidEntry>& table, const GidPrefs& prefs) {
  if (table.empty()) return -1;
  const int n = static_cast<int>(table.size());
  if (prefs.index >= 0 && prefs.index < n) return prefs.index;
  for (int i = 0; i < n; ++i)
    if (familyMatches(table[i], prefs.family) && table[i].roceVersion == prefs.roceVersion) return i;
  for (int i = 0; i < n; ++i)
    if (familyMatches(table[i], prefs.family)) return i;
  return 0;
}

// ---- queue-pair attributes -------------------------------------------------

QpAttr qpInitAttr(int port, const QpOptions& o) {
  QpAttr a;
  a.attr.qp_state = IBV_QPS_INIT;
  a.attr.pkey_index = static_cast<uint16_t>(o.pkeyIndex);
  a.attr.port_num = static_cast<uint8_t>(port);
  a.attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  a.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  return a;
}

QpAttr qpRtrAttr(const PeerQp& remote, int port, int localGidIndex, int localMtu, const QpOptions& o) {
  QpAttr a;
  a.attr.qp_state = IBV_QPS_RTR;
  a.attr.path_mtu = static_cast<ibv_mtu>(std::min(remote.mtu, localMtu));
  a.attr.dest_qp_num = remote.qpn;
  a.attr.rq_psn = remote.psn;
  a.attr.max_dest_rd_atomic = 1;
  a.attr.min_rnr_timer = 12;
  a.attr.ah_attr.port_num = static_cast<uint8_t>(port);
  a.attr.ah_attr.sl = static_cast<uint8_t>(o.sl);
  if (remote.roce) {  // Ethernet: no LIDs; route by GID
    a.attr.ah_attr.is_global = 1;
    std::memcpy(a.attr.ah_attr.grh.dgid.raw, remote.gid, 16);
    a.attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(localGidIndex);
    a.attr.ah_attr.grh.hop_limit = 255;
    a.attr.ah_attr.grh.traffic_class = static_cast<uint8_t>(o.tc);
    a.attr.ah_attr.grh.flow_label = 0;
  } else {
    a.attr.ah_attr.is_global = 0;
    a.attr.ah_attr.dlid = remote.lid;
  }
  a.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
           IBV_QP_MIN_RNR_TIMER;
  return a;
}

QpAttr qpRtsAttr(uint32_t localPsn, const QpOptions& o) {
  QpAttr a;
  a.attr.qp_state = IBV_QPS_RTS;
  a.attr.timeout = static_cast<uint8_t>(o.timeout);
  a.attr.retry_cnt = static_cast<uint8_t>(o.retryCnt);
  a.attr.rnr_retry = 7;
  a.attr.sq_psn = localPsn;
  a.attr.max_rd_atomic = 1;
  a.mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
           IBV_QP_MAX_QP_RD_ATOMIC;
  return a;
}

// ---- registration cache ----------------------------------------------------

RegCache::RegCache(size_t pageBytes, size_t maxIdle, RegisterFn reg, DeregisterFn dereg)
    : page_(pageBytes), maxIdle_(maxIdle), reg_(std::move(reg)), dereg_(std::move(dereg)) {}

RegCache::~RegCache() {
  for (Entry& e : entries_) dereg_(e.mr);
}

void* RegCache::acquire(const void* addr, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t start = a / page_ * page_;
  const uintptr_t end = (a + std::max<size_t>(bytes, 1) + page_ - 1) / page_ * page_;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->start <= start && end <= it->end) {
      ++it->refs;
      entries_.splice(entries_.begin(), entries_, it);
      return it->mr;
    }
  }
  void* mr = reg_(start, end - start);
  if (mr == nullptr) return nullptr;
  entries_.push_front(Entry{start, end, mr, 1});
  return mr;
}

bool RegCache::release(void* mr) {
  for (Entry& e : entries_) {
    if (e.mr != mr) continue;
    if (e.refs <= 0) return false;
    if (--e.refs == 0) evict();
    return true;
  }
  return false;
}

void RegCache::evict() {
  size_t idleCount = idle();
  for (auto it = entries_.end(); idleCount > maxIdle_ && it != entries_.begin();) {
    --it;
    if (it->refs != 0) continue;
    dereg_(it->mr);
    it = entries_.erase(it);
    --idleCount;
  }
}

size_t RegCache::idle() const {
  return static_cast<size_t>(std::count_if(entries_.begin(), entries_.end(), [](const Entry& e) { return e.refs == 0; }));
}

int RegCache::refs(void* mr) const {
  for (const Entry& e : entries_)
    if (e.mr == mr) return e.refs;
  return -1;
}

// ---- wire layout -----------------------------------------------------------

size_t qpShare(size_t bytes, int q, int nQps, size_t align) {
  const size_t off = qpOffset(bytes, q, nQps, align);
  const size_t next = qpOffset(bytes, q + 1, nQps, align);
  return next - off;
}

size_t qpOffset(size_t bytes, int q, int nQps, size_t align) {
  size_t part = (bytes + nQps - 1) / nQps;
  part = (part + align - 1) / align * align;
  return std::min(bytes, part * static_cast<size_t>(q));
}

// ---- options ---------------------------------------------------------------

IbOptions readOptions(const std::function<const char*(const char*)>& get) {
  auto value = [&](const char* name) -> const char* {
    std::string plait = std::string("PLAIT_") + name, nccl = std::string("NCCL_") + name;
    if (const char* v = get(plait.c_str())) return v;
    return get(nccl.c_str());
  };
  auto integer = [&](const char* name, int def) {
    const char* v = value(name);
    return v && *v ? std::atoi(v) : def;
  };
  IbOptions o;
  if (const char* v = value("IB_HCA")) o.hca = HcaSpec::parse(v);
  o.gid.index = integer("IB_GID_INDEX", -1);
  o.gid.roceVersion = integer("IB_ROCE_VERSION_NUM", 2);
  const char* fam = value("IB_ADDR_FAMILY");
  o.gid.family = fam && std::strcmp(fam, "AF_INET6") == 0 ? AF_INET6 : AF_INET;
  o.qp.timeout = std::clamp(integer("IB_TIMEOUT", 20), 1, 31);
  o.qp.retryCnt = std::clamp(integer("IB_RETRY_CNT", 7), 0, 7);
  o.qp.sl = std::clamp(integer("IB_SL", 0), 0, 15);
  o.qp.tc = std::clamp(integer("IB_TC", 0), 0, 255);
  o.qp.pkeyIndex = std::max(integer("IB_PKEY", 0), 0);
  o.qpsPerConnection = std::clamp(integer("IB_QPS_PER_CONNECTION", 1), 1, kMaxQps);
  return o;
}

}  // namespace plait::ib
