// The CPU priority of this process's threads.
//
// Thread-safe: plain system calls.
#ifndef PS_COMMON_PROCESS_PRIORITY_H_
#define PS_COMMON_PROCESS_PRIORITY_H_

namespace ps {

// Lowers every thread of this process (and so every thread they start
// later) to nice value `nice` (0..19) when it is above theirs: work that
// must not take the CPU from processes that serve (a shard that handed
// over writes its generation while the next shard map's servers start on
// the same host). Best effort: a thread it cannot change keeps its value.
void LowerThisProcessPriority(int nice);

}  // namespace ps

#endif  // PS_COMMON_PROCESS_PRIORITY_H_
