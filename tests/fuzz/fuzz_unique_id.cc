// fuzz_unique_id — the 128 bytes of an ncclUniqueId, which a job passes
// between processes by whatever means it likes (a file, MPI, a key-value
// store): decodeUniqueId must refuse anything that is not a Plait id with a
// usable root address, and what it accepts must describe itself and encode
// back to an id that decodes the same.
#include <cstdint>
#include <cstring>

#include "core/bootstrap.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  std::memcpy(id.internal, data, size < sizeof(id.internal) ? size : sizeof(id.internal));
  auto decoded = plait::decodeUniqueId(id);
  if (!decoded.isOk()) {
    PLAIT_FUZZ_CHECK(!decoded.status().message().empty());  // a refusal must say why
    return 0;
  }
  const plait::UniqueIdContents& c = decoded.value();
  PLAIT_FUZZ_CHECK(c.magic == plait::kUniqueIdMagic && c.root.isValid());
  // What the bootstrap does with an accepted id before it connects: print
  // the root, ask whether it is loopback, size its sockaddr.
  (void)c.root.toString();
  (void)c.root.isLoopback();
  PLAIT_FUZZ_CHECK(c.root.sockaddrLen() > 0);

  ncclUniqueId again;
  plait::encodeUniqueId(c, &again);
  auto redecoded = plait::decodeUniqueId(again);
  PLAIT_FUZZ_CHECK(redecoded.isOk());
  const plait::UniqueIdContents& r = redecoded.value();
  PLAIT_FUZZ_CHECK(r.magic == c.magic && r.nonce == c.nonce && r.hostedByRank0 == c.hostedByRank0 &&
                   r.root == c.root);
  return 0;
}
