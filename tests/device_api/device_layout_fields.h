// device_layout_fields.h — the fields of the device API's structures that a
// library fills and a kernel reads (nccl_device.h), as an X-macro list
// FIELD(struct, member); SIZE(struct) for whole sizes. Included by a
// translation unit against Plait's header and by one against NVIDIA's, so
// the test compares the two layouts field by field.
#define PLAIT_DEVICE_LAYOUT(SIZE, FIELD)                                                                      \
  SIZE(ncclTeam) FIELD(ncclTeam, nRanks) FIELD(ncclTeam, rank) FIELD(ncclTeam, stride)                        \
  SIZE(ncclWindow_vidmem) FIELD(ncclWindow_vidmem, winHost) FIELD(ncclWindow_vidmem, lsaFlatBase)             \
  FIELD(ncclWindow_vidmem, lsaRank) FIELD(ncclWindow_vidmem, worldRank) FIELD(ncclWindow_vidmem, stride4G)    \
  FIELD(ncclWindow_vidmem, mcOffset4K) FIELD(ncclWindow_vidmem, ginOffset4K) FIELD(ncclWindow_vidmem, ginWins) \
  SIZE(ncclDevCommWindowTable) FIELD(ncclDevCommWindowTable, entries) FIELD(ncclDevCommWindowTable, next)     \
  SIZE(ncclDevComm) FIELD(ncclDevComm, rank) FIELD(ncclDevComm, nRanks) FIELD(ncclDevComm, nRanks_rcp32)      \
  FIELD(ncclDevComm, lsaRank) FIELD(ncclDevComm, lsaSize) FIELD(ncclDevComm, lsaSize_rcp32)                   \
  FIELD(ncclDevComm, windowTable) FIELD(ncclDevComm, resourceWindow) FIELD(ncclDevComm, resourceWindow_inlined) \
  FIELD(ncclDevComm, lsaMultimem) FIELD(ncclDevComm, lsaBarrier) FIELD(ncclDevComm, railGinBarrier)           \
  FIELD(ncclDevComm, ginContextCount) FIELD(ncclDevComm, ginTypes) FIELD(ncclDevComm, ginHandles)             \
  FIELD(ncclDevComm, ginSignalBase) FIELD(ncclDevComm, ginSignalCount) FIELD(ncclDevComm, ginCounterBase)     \
  FIELD(ncclDevComm, ginCounterCount) FIELD(ncclDevComm, ginSignalShadows)                                    \
  SIZE(ncclLsaBarrierHandle) FIELD(ncclLsaBarrierHandle, bufHandle) FIELD(ncclLsaBarrierHandle, nBarriers)    \
  SIZE(ncclGinBarrierHandle) FIELD(ncclGinBarrierHandle, signal0) FIELD(ncclGinBarrierHandle, bufHandle)      \
  SIZE(ncclLLA2AHandle) FIELD(ncclLLA2AHandle, bufHandle) FIELD(ncclLLA2AHandle, nSlots)                      \
  SIZE(ncclMultimemHandle) FIELD(ncclMultimemHandle, mcBasePtr)                                               \
  SIZE(ncclDevCommRequirements) FIELD(ncclDevCommRequirements, resourceRequirementsList)                      \
  FIELD(ncclDevCommRequirements, teamRequirementsList) FIELD(ncclDevCommRequirements, lsaMultimem)            \
  FIELD(ncclDevCommRequirements, barrierCount) FIELD(ncclDevCommRequirements, lsaBarrierCount)                \
  FIELD(ncclDevCommRequirements, railGinBarrierCount) FIELD(ncclDevCommRequirements, lsaLLA2ABlockCount)      \
  FIELD(ncclDevCommRequirements, lsaLLA2ASlotCount) FIELD(ncclDevCommRequirements, ginForceEnable)            \
  FIELD(ncclDevCommRequirements, ginContextCount) FIELD(ncclDevCommRequirements, ginSignalCount)              \
  FIELD(ncclDevCommRequirements, ginCounterCount)                                                             \
  SIZE(ncclDevResourceRequirements) FIELD(ncclDevResourceRequirements, next)                                  \
  FIELD(ncclDevResourceRequirements, bufferSize) FIELD(ncclDevResourceRequirements, bufferAlign)              \
  FIELD(ncclDevResourceRequirements, outBufferHandle) FIELD(ncclDevResourceRequirements, ginSignalCount)      \
  FIELD(ncclDevResourceRequirements, ginCounterCount) FIELD(ncclDevResourceRequirements, outGinSignalStart)   \
  FIELD(ncclDevResourceRequirements, outGinCounterStart)                                                      \
  SIZE(ncclTeamRequirements) FIELD(ncclTeamRequirements, next) FIELD(ncclTeamRequirements, team)              \
  FIELD(ncclTeamRequirements, multimem) FIELD(ncclTeamRequirements, outMultimemHandle)

// Fills `out` with the sizes and offsets in list order (at most `max`);
// returns how many. `names` (if not null) gets "struct" / "struct.member".
#define PLAIT_DEVICE_LAYOUT_FUNCTION(fn)                                                 \
  int fn(size_t* out, const char** names, int max) {                                    \
    int n = 0;                                                                           \
    auto put = [&](size_t v, const char* name) {                                        \
      if (n < max) {                                                                     \
        out[n] = v;                                                                      \
        if (names) names[n] = name;                                                      \
      }                                                                                  \
      ++n;                                                                               \
    };                                                                                   \
    PLAIT_DEVICE_LAYOUT(PLAIT_LAYOUT_SIZE, PLAIT_LAYOUT_FIELD)                          \
    return n;                                                                            \
  }
#define PLAIT_LAYOUT_SIZE(s) put(sizeof(struct s), #s);
#define PLAIT_LAYOUT_FIELD(s, m) put(offsetof(struct s, m), #s "." #m);
