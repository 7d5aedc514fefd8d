// Plain option structs for a job, filled by the YAML loader (common/config.h)
// and checked by Validate() before anything starts. Every field has its
// meaning, unit and default here; config/README.md documents the YAML keys.
// The train section is not here: the worker reads and checks it
// (worker/train_options.h).
#ifndef PS_COMMON_OPTIONS_H_
#define PS_COMMON_OPTIONS_H_

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/table_options.h"

namespace ps {

// What a server binds (cluster.bind).
enum class BindMode {
  kAddress,  // the address its cluster.servers host resolves to (the default)
  kAll,      // every interface, on its port (needs cluster.allow_remote)
};

inline constexpr EnumName<BindMode> kBindModeNames[] = {
    {"address", BindMode::kAddress},
    {"all", BindMode::kAll},
};

// Where the servers listen and how many workers the job has.
struct ClusterOptions {
  // One "host:port" per shard, in shard order; a host is an IPv4 address,
  // an IPv6 address in brackets or a name (common/endpoint.h). Shard i
  // binds what its host resolves to (or every interface, see `bind`) and
  // workers connect to the name. Required, non-empty, no duplicates.
  std::vector<std::string> servers;
  // What each server binds. Default kAddress.
  BindMode bind = BindMode::kAddress;
  // Number of worker processes (ranks 0..workers-1). Required, >= 1.
  uint32_t workers = 0;
  // Allow server addresses other than loopback (127.0.0.0/8, ::1, localhost).
  // Plain TCP off loopback must be asked for explicitly.
  bool allow_remote = false;
  // An evaluator process (ps_worker --evaluator) measures the model on the
  // held-out data as training goes, instead of worker 0 between its steps.
  // The shards serve it pulls only and keep serving until it says goodbye
  // (or is dead) after the workers left. Default false: worker 0 evaluates.
  bool evaluator = false;
};

enum class ConsistencyMode { kBsp, kSsp, kAsp };

inline constexpr EnumName<ConsistencyMode> kConsistencyModeNames[] = {
    {"bsp", ConsistencyMode::kBsp},
    {"ssp", ConsistencyMode::kSsp},
    {"asp", ConsistencyMode::kAsp},
};

// The staleness bound of asp: pulls never wait.
inline constexpr int64_t kUnboundedStaleness = std::numeric_limits<int64_t>::max();

// How far workers may run ahead of each other (DESIGN.md section 5). Each
// worker has a clock (0, 1, ...); a pull from a worker at clock c is answered
// once every worker has finished clock c - 1 - bound, so it sees every
// update of every worker for clocks < c - bound, and its own.
struct ConsistencyOptions {
  // bsp: bound 0 (lockstep); ssp: bound `staleness`; asp: no bound.
  // Default asp: pulls never wait.
  ConsistencyMode mode = ConsistencyMode::kAsp;
  // ssp only, >= 1; bsp and asp take no staleness.
  uint32_t staleness = 0;
  // bsp only: each shard sums every worker's pushes of a clock and applies
  // their mean once, when the last worker finishes that clock (a true
  // global batch), instead of applying each push as it arrives. A worker's
  // own pushes then show in its reads from the next clock on. Turns the
  // parameter cache off. Default false.
  bool aggregate = false;
  // bsp with aggregate only: backup workers (Chen et al., arXiv
  // 1604.00981). Of the job's workers, a clock's update is the mean of the
  // first workers - backup_workers gradients to reach each shard; the
  // others' pushes of that clock arrive late and are dropped (counted and
  // logged), and a worker left behind continues at the job's clock. A
  // persistently slow worker then no longer sets the job's pace. < workers;
  // default 0 (every worker's gradient, as without this setting).
  uint32_t backup_workers = 0;
  // How many gradients make a clock's update: workers - backup_workers.
  uint32_t Quorum(uint32_t workers) const {
    return backup_workers < workers ? workers - backup_workers : workers;
  }

  // 0 for bsp, staleness for ssp, kUnboundedStaleness for asp.
  int64_t Bound() const {
    switch (mode) {
      case ConsistencyMode::kBsp: return 0;
      case ConsistencyMode::kSsp: return staleness;
      case ConsistencyMode::kAsp: return kUnboundedStaleness;
    }
    return kUnboundedStaleness;
  }
};

// "bsp", "ssp 3", "asp".
std::string ConsistencyName(const ConsistencyOptions& consistency);


enum class DeadWorkerPolicy { kFail, kDrop };

// What a shard does with a push whose result is not finite
// (ServerOptions::on_non_finite_result).
enum class NonFiniteResultPolicy { kRefuse, kFlag };

inline constexpr EnumName<NonFiniteResultPolicy> kNonFiniteResultPolicyNames[] = {
    {"refuse", NonFiniteResultPolicy::kRefuse},
    {"flag", NonFiniteResultPolicy::kFlag},
};

inline constexpr EnumName<DeadWorkerPolicy> kDeadWorkerPolicyNames[] = {
    {"fail", DeadWorkerPolicy::kFail},
    {"drop", DeadWorkerPolicy::kDrop},
};

// How shards notice workers that died (DESIGN.md section 5: a slow or dead
// worker never freezes the job without a clear message).
struct LivenessOptions {
  // Each worker sends a heartbeat to every shard this often, from a thread
  // of its own, milliseconds. 0 turns heartbeats and dead-worker detection
  // off. Default 500.
  uint32_t heartbeat_ms = 500;
  // A shard that hears nothing from a worker (no request, no heartbeat) for
  // this long marks it dead and logs who and since when (a worker that
  // never spoke: this long after the start-up grace period,
  // rendezvous.timeout_ms). Milliseconds, >= 2 * heartbeat_ms, and under
  // bsp and ssp at most client.request_timeout_ms - 1000 (a pull waiting
  // for a dead worker must outlive this). Default 8000.
  uint32_t timeout_ms = 8000;
  // kFail: the job fails: every request gets an error naming the dead
  // worker. kDrop: the dead worker no longer holds the minimum clock back,
  // the others go on, and the worker may rejoin (Client::Join). Default kFail.
  DeadWorkerPolicy on_dead_worker = DeadWorkerPolicy::kFail;
  // Servers (DESIGN.md section 7): ps_launch restarts a server that dies by
  // a signal (a crash, the out-of-memory killer, kill -9) at most this many
  // times per shard over the job; the new process restores the shard's
  // newest checkpoint generation and the workers go on. Needs
  // checkpoint.dir (without it a restarted shard would serve its initial
  // values, so the job stops instead). 0: never restart. Default 10.
  uint32_t server_restarts = 10;
  // Workers, under on_dead_worker kDrop: ps_launch starts a worker that
  // failed (an exit code or a signal) again at most this many times per
  // rank; it rejoins at the clock the servers hold for it. Past the limit
  // (or with 0) the job goes on without it. Under kFail a failed worker
  // stops the job. Default 3.
  uint32_t worker_restarts = 3;
  // A worker whose connection to a server drops waits this long for the
  // server to come back (its requests are sent again when it does) before
  // they fail naming the server. Milliseconds, >= 1. Default 60000.
  uint32_t server_down_timeout_ms = 60000;
  // A connection to a server that dropped (a worker's, a control client's,
  // a heartbeat's, a primary's to its backup) is tried again this often
  // until the server is back, milliseconds: a restarted server serves
  // about this long after it bound, at most. Each try is a TCP connect to
  // the server's host (refused at once while nothing listens there), so a
  // job of very many workers may want more. >= 1, at most
  // server_down_timeout_ms. Default 20.
  uint32_t reconnect_ms = 20;
};

// The start-up check of a job (common/rendezvous.h, DESIGN.md section 12).
struct RendezvousOptions {
  // Before clock 0 each worker waits this long for every server to answer
  // and agree on the job (the model, the shard and worker counts, the
  // consistency model); a server that does not answer in time is named and
  // the worker exits. A shard, in turn, counts a worker that never spoke as
  // silent only from this long after the shard started (a start-up grace
  // period for liveness.timeout_ms), so processes started by a launcher
  // (or by hand) in any order, seconds apart, find each other.
  // Milliseconds, >= 1. Default 60000.
  uint32_t timeout_ms = 60000;
};

// Artificial stragglers, for tests and benchmarks of the consistency modes.
// Delays are in units of a step: `step_ms` when set, else the worker's own
// compute time of the step, so they scale with the machine.
struct StragglerOptions {
  // Rank of a worker slowed down by `slow_factor`: after each step it waits
  // (slow_factor - 1) steps; -1: none. Default -1.
  int64_t slow_worker = -1;
  // >= 1. Default 1.
  double slow_factor = 1.0;
  // Every worker, after each step, pauses with this probability, in [0, 1].
  // Default 0.
  double pause_probability = 0.0;
  // A pause lasts a whole number of the worker's step times, uniform in
  // [pause_min_steps, pause_max_steps]. 1 <= min <= max. Default 1..3.
  uint32_t pause_min_steps = 1;
  uint32_t pause_max_steps = 3;
  // Seed of the pauses (each worker draws from seed + rank).
  uint64_t seed = 1;
  // The step, in milliseconds, >= 0. 0 (default): the worker's own compute
  // time of each step, which leaves out its pulls, pushes and waits. Set it
  // to a whole step of the job (e.g. its per-clock time under bsp without
  // stragglers) for a worker that is slow as a whole, with the same delay
  // in every consistency mode.
  double step_ms = 0.0;
  // Work that follows speed (worker/batch_balance.h): under bsp and ssp
  // each worker measures its samples per second of work (its waits for
  // slower workers left out) over every `balance_window` clocks, and the
  // workers split the job's samples per clock (workers x the training
  // program's minibatch) in proportion, so that every worker's clock takes
  // about as long; each gradient is weighted by its samples. The rates
  // travel in the table kBalanceTableName, which the loader adds. Default
  // false. Refused under asp (no worker waits for another there).
  bool balance = false;
  // Clocks per measurement and decision, >= 1. Default 10.
  uint32_t balance_window = 10;

  bool any() const { return slow_worker >= 0 || pause_probability > 0; }
};

// The table that carries each worker's rate under stragglers.balance: one
// row per worker, dim 1, optimizer add; the job loader adds it, and a job
// file may not name a table so.
inline constexpr const char* kBalanceTableName = "_ps_balance";

// Where a worker computes (worker/backend.h).
enum class DeviceKind { kAuto, kCpu, kCuda };

inline constexpr EnumName<DeviceKind> kDeviceKindNames[] = {
    {"auto", DeviceKind::kAuto},
    {"cpu", DeviceKind::kCpu},
    {"cuda", DeviceKind::kCuda},
};

// The worker process.
struct WorkerOptions {
  // auto: CUDA when the CUDA backend was built and a device is present,
  // else the CPU (the worker logs which and why); cpu; cuda: an error where
  // no device is usable. Default auto.
  DeviceKind device = DeviceKind::kAuto;
  // Threads of the CPU backend's BLAS (OpenBLAS), 0..1024. 0 (default):
  // ps_launch, which starts every worker on one host, gives each worker
  // its share of the host's cores (at least 1); a worker started on its
  // own uses OpenBLAS's default (OPENBLAS_NUM_THREADS, else every core).
  // Several workers on one host with all cores each oversubscribe it.
  uint32_t cpu_threads = 0;
};

// Limits and behaviour of each ps_server process.
// Descriptors a shard keeps out of server.max_connections's default: its
// checkpoint files (RocksDB), its own sockets (replication, the metrics
// endpoint, etcd) and a margin.
inline constexpr uint32_t kReservedFiles = 128;

struct ServerOptions {
  // Largest request a shard accepts, all frames together, in bytes; larger
  // requests get an ERROR reply. >= 1024. Default 256 MiB. Frames above twice this
  // size are dropped by the transport before they are read.
  uint64_t max_request_bytes = 256ull << 20;
  // Largest key count of one request. Default 16M.
  uint64_t max_keys_per_request = 16ull << 20;
  // ZeroMQ I/O threads of the server's context, 1..64. Default 1.
  uint32_t io_threads = 1;
  // Refuse pushes that contain NaN or Inf (an ERROR reply; nothing is
  // applied), so one bad gradient cannot poison the model. Costs one
  // vectorized pass over the pushed values. Default true.
  bool reject_non_finite = true;
  // A push of finite values whose result is not finite: a value (or
  // optimizer state) that the update overflows to Inf or turns into NaN,
  // e.g. sgd's w - lr * g past 3.4e38. kRefuse: the push gets an ERROR
  // (OutOfRange) naming the table and a row, and no row of it is applied
  // (the rows it touched are saved before the update and put back). kFlag:
  // applied; the table is flagged (STATS: non_finite_rows) and logged once.
  // An aggregated update (consistency.aggregate) answers no single push:
  // under kRefuse the rows whose result would not be finite keep their
  // values, under kFlag they take it; both count and log as above.
  // Default kRefuse.
  NonFiniteResultPolicy on_non_finite_result = NonFiniteResultPolicy::kRefuse;
  // How far above the clock a shard holds for a worker the first clock it
  // accepts from that worker may be (a CLOCK, a resume, or the clock of a
  // PUSH or PULL), when it has not heard the worker's clock since the shard
  // started, since the worker's HELLO, or since the worker's requests began
  // arriving on a new connection; after that a worker moves one clock per
  // CLOCK. Clocks. 0 (default): derived from the job, as
  // EffectiveMaxResumeClocks says: a shard restarted from its newest
  // checkpoint is behind the workers by less than 2 x
  // checkpoint.every_clocks (a generation being written when it died is
  // lost) plus the staleness bound plus 1 (a worker's lead over the
  // minimum clock), and a worker that rejoins or reconnects is ahead of a
  // shard by at most client.max_in_flight CLOCKs lost in flight. A clock
  // beyond it is refused (a forged or corrupt request), so no message moves
  // a clock further. At most 2^62.
  uint64_t max_resume_clocks = 0;
  // Exit (code 0) once every worker has left the job: said goodbye when it
  // finished, or was dropped as dead (liveness.on_dead_worker: drop), so
  // that a job under mpirun, srun or a Kubernetes Job ends when its workers
  // do. false: keep serving until SHUTDOWN or a signal (for ps_ctl status
  // after the job, or workers that come in waves). Default true.
  bool exit_when_workers_leave = true;
  // Messages ZeroMQ queues per connection in each direction on the shard's
  // socket (ZMQ_SNDHWM and ZMQ_RCVHWM of its ROUTER). A full receive queue
  // makes ZeroMQ stop reading that connection until the shard catches up; a
  // reply to a connection whose send queue is full is dropped, counted
  // (STATS replies_dropped) and logged, and its client's request times out.
  // A good worker has at most client.max_in_flight requests outstanding per
  // shard, each with one reply, so it never fills it: > client.max_in_flight.
  // Default 1000 (ZeroMQ's own default).
  uint32_t socket_hwm = 1000;
  // Bytes of pull replies one connection, and all the connections of one
  // worker id together, may have queued: handed to ZeroMQ and not yet
  // written to the kernel (a client that does not read its replies stops
  // that). A reply is counted by what it keeps alive: the whole store block
  // (about 1 MiB) of each block it shares, the size of a gathered frame. A
  // pull arriving while its connection is at or over this gets
  // ResourceExhausted naming this option instead of being served, and so
  // does one of a connection holding an equal share or more of
  // (cluster.workers + 1) x this once all connections together hold that;
  // so the blocks kept from the store (a push into a block still held by a
  // reply copies it) stay under twice that plus max_request_bytes per
  // connection, and another holder of a worker's key cannot use up the
  // worker's own. A good worker
  // has queued only the pulls it waits for: one per table per step, at most
  // the shard's values, twice over when steps overlap, or a few whole-table
  // pulls kept in flight (8 pulls of 64 MiB, the transport benchmark's
  // largest, are 512 MiB); the first pull of an empty queue is always
  // served. 0 (default): twice the bytes of the shard's values, at least
  // 1 GiB. Otherwise >= 1 MiB; set it lower to bound memory more tightly
  // where workers keep fewer bytes in flight.
  uint64_t max_queued_reply_bytes = 0;
  // Pulls of one connection waiting at once for slower workers (the
  // staleness bound); one more gets ResourceExhausted naming this option. A
  // good worker waits with at most its requests in flight, so
  // >= client.max_in_flight. Per connection, so that whoever else holds a
  // worker's key cannot use up the worker's own. Default 1024.
  uint32_t max_waiting_pulls_per_worker = 1024;
  // Longest a pull waits for slower workers, whatever its request asks (a
  // request's max_wait_ms of 0 means this); then it is answered
  // DeadlineExceeded naming the slowest worker. Milliseconds,
  // >= client.request_timeout_ms (the client asks for a little less).
  // Default 600000 (10 minutes).
  uint32_t max_pull_wait_ms = 600000;
  // Connections a shard keeps open at once (workers, their heartbeats,
  // ps_ctl, the evaluator); one more is closed as soon as it is accepted,
  // logged and counted, so that the shard never runs out of file
  // descriptors (a failed accept is retried at once, over and over) and
  // keeps some for its checkpoints and its own sockets. 0 (default): the
  // process's open-file limit (raised to its hard limit at start) less
  // kReservedFiles. A shard whose limit leaves fewer than 16 refuses to
  // start, naming the limit.
  uint32_t max_connections = 0;
  // Large arrays (dense tables' blocks, hashed tables' rows and index) on
  // 2 MiB transparent huge pages where the system gives them (its setting
  // "madvise" or "always"): a restore backs them 512 times fewer pages at a
  // time, lookups miss the TLB less. false: 4 KiB pages, for hosts where a
  // huge page's first touch is slow (a hypervisor that takes freed guest
  // memory back: free page reporting). Default true.
  bool huge_pages = true;
};

// Behaviour of the worker-side client library.
struct ClientOptions {
  // A request without a reply after this long fails with DeadlineExceeded
  // naming the server. Milliseconds, >= 1. Default 10000.
  uint32_t request_timeout_ms = 10000;
  // Requests in flight per server before Push/Pull wait for replies. >= 1.
  uint32_t max_in_flight = 256;
  // A push is sent in parts of at most this many value bytes (whole rows),
  // so a shard applies one part while the next is on the wire and no
  // receive buffer is huge. >= 4096. Default 1 MiB.
  uint64_t push_part_bytes = 1ull << 20;
  // Under ssp, keep pulled rows in a parameter cache and serve reads from it
  // while the staleness bound allows (bsp and asp never cache). Default true.
  bool cache = true;
  // ZeroMQ I/O threads of the client's context, 1..64. Default 1.
  uint32_t io_threads = 1;
};

enum class SecurityMode { kNone, kCurve };

inline constexpr EnumName<SecurityMode> kSecurityModeNames[] = {
    {"none", SecurityMode::kNone},
    {"curve", SecurityMode::kCurve},
};

// Who may talk to the servers (DESIGN.md section 10, common/security.h).
struct SecurityOptions {
  // kNone: plain TCP; any process that reaches a server's port can read,
  // change and stop the job (for a trusted network or one host only).
  // kCurve: CurveZMQ on every socket: traffic is encrypted, and a server
  // lets in only the client keys of the job (each worker's own key, and
  // the admin's), takes each sender's identity from its key, and lets only
  // the admin key stop, checkpoint or inspect it. Default kNone.
  SecurityMode mode = SecurityMode::kNone;
  // kCurve: the folder of the job's key files (`ps_ctl keygen` writes
  // them; common/security.h lists the names). Each process reads only the
  // files of its role. A relative path is taken from the current
  // directory, as checkpoint.dir is. Required with kCurve; empty with kNone.
  std::string keys_dir;
};

// Checkpoints of every shard's tables in RocksDB (DESIGN.md section 7,
// server/checkpoint.h).
// The most generations checkpoint.full_every may ask per full one.
inline constexpr uint32_t kMaxFullEvery = 1000;

struct CheckpointOptions {
  // Folder of the checkpoints; shard i keeps its generations in
  // dir/shard-<i>/. Empty (default): no checkpoints.
  std::string dir;
  // Each shard writes a generation whenever its minimum clock reaches a
  // multiple of this (in the background: serving pauses only to take a
  // snapshot that shares the shard's blocks). >= 1. Default 1000.
  uint32_t every_clocks = 1000;
  // Generations kept per shard, >= 1, besides those a kept one builds on
  // (a delta's chain down to its full generation). Default 3.
  uint32_t keep = 3;
  // A full generation (every row) every this many generations; the ones
  // between are deltas, holding only the blocks (range tables) and rows
  // (hashed tables) changed since the generation before, and restore reads
  // the full one and each delta after it. Also full: the first one after a
  // start or a failed write, and one where another delta as large as the
  // last would bring the deltas since the full one above its size. 1 to 1000; default 1 (every generation full). Above 1 a
  // hashed table's rows take 4 more bytes each (counted in max_mb).
  uint32_t full_every = 1;
  // fsync each generation's files and folders before it becomes visible,
  // so a power loss cannot lose or tear it. Default true; false trades that
  // for speed (a process crash still cannot tear a generation).
  bool sync = true;
  // On start, a shard whose folder holds generations restores the newest
  // (ps_server --restore-clock picks another). Default true.
  bool restore = true;
};

// Who decides which replica of each shard is its primary, at which epoch.
enum class ReplicationAuthority { kLauncher, kEtcd };

inline constexpr EnumName<ReplicationAuthority> kReplicationAuthorityNames[] = {
    {"launcher", ReplicationAuthority::kLauncher},
    {"etcd", ReplicationAuthority::kEtcd},
};

// replication.etcd: the etcd cluster that is the authority over the
// replicas (server/etcd_authority.h).
struct EtcdOptions {
  // etcd's client URLs as "host:port" (tried in order; one of a cluster's
  // members is enough, more survive a member's loss). Required with
  // authority etcd.
  std::vector<std::string> endpoints;
  // Every key of this job lies under it (two jobs on one etcd need two
  // prefixes). Empty (default): "/ps/<the job's fingerprint>".
  std::string prefix;
  // Seconds a server's lease lives without a renewal: a dead server's
  // replicas act after it lapses (fail-over takes this long), and a primary
  // that cannot renew it for most of this stops acknowledging writes. >= 1;
  // etcd raises a TTL below its own minimum (1.5 election timeouts). Default 2.
  uint32_t lease_ttl_s = 2;
  // Wait for one etcd request's first try, milliseconds. A request that no
  // endpoint answered is tried again after a pause, each try waiting twice
  // as long, for as long as the lease allows (a running server) or
  // start_timeout_ms (a starting one): a slow etcd is not a dead one.
  // >= 10, below lease_ttl_s. Default 500.
  uint32_t request_timeout_ms = 500;
  // How long a starting server keeps trying to reach etcd (grant its lease,
  // find its shard's primary) before it gives up, milliseconds.
  // >= request_timeout_ms. Default 30000.
  uint32_t start_timeout_ms = 30000;
};

// Replicated shards (DESIGN.md section 13, server/replication.h).
struct ReplicationOptions {
  // Copies of each shard's rows: 1 (default) is one copy, no backups. With
  // k >= 2, range i (the rows of shard i) has its primary, ps_server
  // --shard i, at cluster.servers[i], and k - 1 backups: backup j
  // (ps_server --shard i --replica j, 1 <= j < k) runs on the host of the
  // next server on the ring, cluster.servers[(i + j) mod S], and listens on
  // that entry's port + j x port_offset. A push is acknowledged only once
  // every backup has applied it. 1 <= factor <= the number of servers.
  uint32_t factor = 1;
  // Port distance between a host's primary and its backups (see factor):
  // every derived endpoint must be distinct from each other and from the
  // servers' own. >= 1. Default 1000.
  uint32_t port_offset = 1000;
  // Under consistency.aggregate: the backups get a clock's sums once, when
  // the primary applies them (replication after aggregation), instead of
  // every worker's push as it comes; a push into a sum is then acknowledged
  // once its clock's update is on every backup. false: every push, as
  // without aggregation. Default false: on one host it measured no faster
  // (benchmarks/README.md), and a fail-over keeps every clock's update in
  // its clock.
  bool after_aggregation = false;
  // The authority over each shard's replicas: `launcher` (default)
  // ps_launch, which runs every replica on its host, promotes a dead
  // primary's backup and starts the dead one again; `etcd` the etcd
  // cluster of `etcd`: each ps_server holds a lease there, a shard's primary
  // holds the shard's key, a backup takes it when the primary's lease
  // lapses, and a primary that lost its lease refuses writes (fenced), so
  // replicas may run on many hosts under any launcher.
  ReplicationAuthority authority = ReplicationAuthority::kLauncher;
  EtcdOptions etcd;
};

// Metrics served over HTTP in Prometheus's text format (common/metrics.h,
// config/README.md "Metrics").
struct MetricsOptions {
  // The first port: 0 (default) serves no metrics. Shard i serves on
  // port + i, worker r on port + S + r, backup j of shard i on
  // port + S + W + (j - 1) x S + i (ServerMetricsPort, WorkerMetricsPort),
  // so every process of a job on one host has its own port. port + the
  // highest offset <= 65535, and the range holds no server's port.
  uint32_t port = 0;
  // The address the endpoints listen on. Default 127.0.0.1 (this host's
  // scraper only); 0.0.0.0 or the host's address to be scraped from another
  // host. Metrics say nothing secret, but they say how the job is doing.
  std::string bind = "127.0.0.1";
  // How often a process renews what it serves, milliseconds: a scrape sees
  // values at most this old. 50..60000. Default 1000.
  uint32_t interval_ms = 1000;
  // After its work ends, a process keeps serving its final values this
  // long, milliseconds, so that a scraper's last look sees them (a batch
  // job's last seconds). <= 600000. Default 0.
  uint32_t linger_ms = 0;
};

// The job as every process reads it: servers, workers, tables and the
// limits of each component.
struct JobOptions {
  // The file the options were loaded from (for error messages); may be empty.
  std::string source;
  ClusterOptions cluster;
  // The job-wide optimizer (the top-level `optimizer` section): what a table
  // without an optimizer of its own starts from. Checked by Validate() as
  // the tables' are.
  OptimizerOptions optimizer;
  std::vector<TableOptions> tables;
  ConsistencyOptions consistency;
  LivenessOptions liveness;
  RendezvousOptions rendezvous;
  StragglerOptions stragglers;
  WorkerOptions worker;
  ServerOptions server;
  ClientOptions client;
  CheckpointOptions checkpoint;
  SecurityOptions security;
  ReplicationOptions replication;
  MetricsOptions metrics;

  // Checks every field; returns InvalidArgument naming the YAML path
  // ("<source>: tables[1].rows: ...") of the first problem.
  Status Validate() const;

  // Index of the table called `name`, or NotFound.
  StatusOr<uint32_t> TableId(const std::string& name) const;

  // A fingerprint (16 hex digits) of what a checkpoint must match to be
  // restored into this job: the number of shards and every table's name,
  // rows, dim and optimizer (not the addresses, the workers or the limits).
  std::string Fingerprint() const;
};

// server.max_resume_clocks, or when it is 0 the window derived from the
// job: 2 x checkpoint.every_clocks (0 without checkpoint.dir) + the
// staleness bound + 1 + client.max_in_flight; under asp, whose bound is
// unlimited, kAspResumeLead stands for the bound (raise max_resume_clocks
// for asp runs where one worker leads the slowest by more).
int64_t EffectiveMaxResumeClocks(const JobOptions& job);
inline constexpr int64_t kAspResumeLead = 1000000;


// Worker id used by tools (ps_ctl) that are not one of the job's workers.
// Shards accept it for STATS and SHUTDOWN only.
inline constexpr uint32_t kControlWorker = 0xFFFFFFFFu;
// Worker id of the job's evaluator (cluster.evaluator): it may pull (each
// pull answered once every worker finished the clock it names), send
// heartbeats and say goodbye, nothing else. It is not one of the workers
// and never counts toward the minimum clock.
inline constexpr uint32_t kEvaluatorWorker = 0xFFFFFFFEu;

}  // namespace ps

#endif  // PS_COMMON_OPTIONS_H_
