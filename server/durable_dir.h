// A folder of generations made durable and visible atomically on a POSIX
// file system, whatever a generation holds (server/checkpoint.h puts a
// database in each): the fsyncs, the publish by rename, the removal of torn
// generations and the pruning, on their own.
//
// Names: a complete generation is a folder "gen-<clock>" (decimal, no sign,
// no leading zero but for "gen-0"); any name "gen-...<.tmp>" is a
// generation being written, torn by a crash, or on its way out, and is
// never a generation. A generation is written under its .tmp name, synced
// (SyncFlatFolder), then published (PublishGeneration): a crash at any
// point leaves either the old state or the new one, never a half-written
// gen-<clock>.
//
// Errors: every error names the path and says what failed; its code is
// PermissionDenied (EACCES, EPERM, EROFS), ResourceExhausted (ENOSPC,
// EDQUOT), or Internal for any other failure of the file system.
//
// Every call goes through the Filesystem it is given (common/env.h), so
// tests can fail any write of it.
//
// Thread safety: the functions keep no state; two callers must not work on
// the same folder at once.
#ifndef PS_SERVER_DURABLE_DIR_H_
#define PS_SERVER_DURABLE_DIR_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/env.h"
#include "common/status.h"

namespace ps {

// "gen-<clock>". REQUIRES: clock >= 0.
std::string GenerationName(int64_t clock);
// The clock of a complete generation's name, or -1 for any other name.
int64_t ParseGenerationName(std::string_view name);
// True for "gen-" + at least one character + ".tmp".
bool IsTmpGenerationName(std::string_view name);
// The name a generation `final_name` is written under: final_name + ".tmp".
std::string TmpName(const std::string& final_name);


// fsyncs every regular file directly in `dir` (a flat folder: subfolders
// are not entered), then `dir` itself.
Status SyncFlatFolder(Filesystem& files, const std::string& dir);

// Removes every entry of `dir` with a .tmp generation name (torn writes of
// any clock, generations on their way out); other entries stay, and so
// does "gen-<c>.tmp" for a clock c that `spare` (when set) returns true
// for: a generation another process is writing into the same folder.
Status RemoveTornGenerations(Filesystem& files, const std::string& dir,
                             const std::function<bool(int64_t clock)>& spare = nullptr);

// Makes the complete folder `tmp` visible as `final_path` (same parent):
// one rename, or when `final_path` exists, an atomic exchange and the
// removal of the old one (kept under the .tmp name meanwhile, so a crash
// leaves it to RemoveTornGenerations). Where the file system cannot
// exchange, the old one is moved aside first (a crash in between leaves
// neither, the other generations intact). With `sync`, the parent folder is
// then fsynced, so the new name survives a crash. On an error `tmp` may
// still exist (the caller removes it) and an old `final_path` is intact.
Status PublishGeneration(Filesystem& files, const std::string& tmp,
                         const std::string& final_path, bool sync);

// Clocks of the complete generations in `dir` (folders with a generation
// name; a file of such a name is not one), ascending. Internal (or the
// code of the error) naming `dir` when it cannot be listed.
StatusOr<std::vector<int64_t>> ListGenerations(Filesystem& files, const std::string& dir);

// Removes all but the newest `keep` complete generations of `dir`, and
// those of `also_keep` (when set: the generations kept ones build on),
// oldest first; each is renamed to its .tmp name first, so a crash while
// removing it never leaves a partial gen-<clock>. `renamed` (when set) is
// called after each rename, before the removal, with the .tmp path. With
// `sync`, `dir` is fsynced after the last removal. Stops at the first
// error. REQUIRES: keep >= 1.
Status PruneGenerations(Filesystem& files, const std::string& dir, uint32_t keep, bool sync,
                        const std::function<void(const std::string& doomed)>& renamed,
                        const std::set<int64_t>* also_keep = nullptr);

}  // namespace ps

#endif  // PS_SERVER_DURABLE_DIR_H_
