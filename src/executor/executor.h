// Where a trial runs: a narrow interface over "run this plumb command line somewhere, tell me how it
// is doing, stop it", with two implementations:
//
//   local  a child process of the caller (core/subprocess.h), in its own process group, killed with
//          the caller (PR_SET_PDEATHSIG): a job never outlives the controller that started it, so a
//          restarted controller finds its local jobs gone (kLost) and runs them again.
//   slurm  a Slurm batch job: the command becomes an sbatch script (render_sbatch_script) submitted
//          with `sbatch --parsable`; its state comes from `squeue -t all` while the controller still
//          knows the job and from `sacct` after; cancel is `scancel` (with SlurmSettings::rest_url
//          set, states, lookups and cancels go through slurmrestd instead: slurm_rest.h). A job runs on
//          whatever node Slurm gives it, so everything it needs must be on a filesystem the nodes share (the
//          plumb binary, the work directory) or reachable over the network (a postgresql:// ledger). A
//          restarted controller reattaches by job id: the id is all poll() needs; a job whose id it never
//          learnt, by its name (find_by_name).
//
// What a job does is the caller's business (tune/ submits `plumb tune --run-trial`, which measures on
// its node and writes to the shared ledger): the executor never reads results, only job states.
// A Kubernetes Jobs or Ray executor is a third implementation of Executor (submit = create a Job /
// a task, poll = its status, cancel = delete), chosen by make_executor; nothing above changes.
//
// Thread-safety: one thread per Executor. Errors: Status values; a scheduler command that fails is
// Unavailable with its output, a bad setting InvalidArgument saying which.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"

namespace plumb::executor {

// One unit of work: a command line and where its output goes.
struct JobSpec {
  std::string name;  // short label, [A-Za-z0-9_.-]; the script's and output's file name
  // The name the scheduler shows (sbatch --job-name, squeue --name); "" = `name`. A controller gives
  // each attempt one of its own, so that find_by_name finds that attempt's job and no other.
  std::string scheduler_name;
  std::vector<std::string> argv;  // the command the job runs (argv[0] an absolute path)
  std::string work_dir;           // absolute; the job's cwd, its script and its output file live here
  // Set for the command (on top of the submitter's environment); both executors add
  // NCCL_NVLS_ENABLE=0 over it (set_child_gpu_env).
  std::map<std::string, std::string> env;
};

enum class JobState {
  kPending,     // queued, not started
  kRunning,     // started (Slurm: RUNNING, COMPLETING, CONFIGURING)
  kCompleted,   // exited 0
  kFailed,      // exited non-zero (Slurm: FAILED, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE)
  kCancelled,   // cancelled (scancel, an administrator, preemption)
  kTimedOut,    // past its time limit
  kNodeFailed,  // its node failed
  kLost,        // the executor no longer knows the job (a local job of a dead controller; a Slurm job
                // past MinJobAge with no accounting)
};
std::string state_name(JobState s);
// Whether the job will change no more.
bool is_final(JobState s);

struct JobStatus {
  JobState state = JobState::kPending;
  std::string scheduler_state;  // the scheduler's own word (e.g. "NODE_FAIL"), "" when none
  std::string node;             // where it runs or ran, "" when unknown
  std::string detail;           // exit code, reason, or why it is lost
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string kind() const = 0;  // "local" | "slurm"
  // Starts (or queues) the job; returns its id (a pid or a Slurm job id). The job's output
  // (stdout and stderr) goes to output_path(spec).
  virtual Result<std::string> submit(const JobSpec& spec) = 0;
  // The job's state now. A job id this executor never saw is polled like any other (reattach).
  virtual Result<JobStatus> poll(const std::string& job_id) = 0;
  // Asks the job to stop; a job already finished is not an error.
  virtual Status cancel(const std::string& job_id) = 0;
  // The id of the job submitted under scheduler name `name` that the scheduler still knows (the
  // latest, if several), nullopt when none: how a restarted controller finds a job it submitted but
  // did not journal. Slurm: `squeue -t all --name`, then `sacct --name` (the last 7 days). Local:
  // always nullopt (a local job dies with the controller that started it).
  virtual Result<std::optional<std::string>> find_by_name(const std::string& name) = 0;
};

// Polls the job every `interval` until it is final and returns its last status; `on_change` (may be
// null) hears each state as it changes. A poll that fails (a scheduler that does not answer) is
// tried again, up to 10 times in a row, then its error is returned (the job is not cancelled).
Result<JobStatus> wait_until_final(Executor& e, const std::string& job_id, std::chrono::milliseconds interval,
                                   const std::function<void(const JobStatus&)>& on_change);

// The job's output file: work_dir/name.out.
std::string output_path(const JobSpec& spec);

// What a Slurm job asks for. Every field maps to one sbatch option; empty/zero = not given (the
// cluster's default).
struct SlurmSettings {
  std::string partition;           // --partition
  std::string account;             // --account
  std::string time_limit;          // --time, Slurm's syntax ("30", "1:00:00", "1-00:00:00")
  int gpus = 0;                    // --gres=gpu:N, only when N > 0
  int cpus_per_task = 0;           // --cpus-per-task
  std::string mem;                 // --mem ("64G")
  std::string qos;                 // --qos
  std::string constraint;          // --constraint
  std::string nodelist;            // --nodelist (e.g. a retried comparison stays on its first runs' node)
  std::vector<std::string> extra;  // more sbatch options, verbatim (e.g. "--exclusive")
  // slurmrestd (executor/slurm_rest.h): with rest_url set ("http://host:port"), job states, lookups by
  // name and cancels go through its REST API instead of squeue and scancel; jobs are still submitted
  // with sbatch. The token is the first line of rest_token_file (read on every call) or SLURM_JWT.
  std::string rest_url;              // "" = squeue, sacct and scancel
  std::string rest_api = "v0.0.38";  // the OpenAPI version slurmrestd serves (22.05: v0.0.36..v0.0.38)
  std::string rest_user;             // the user the token was made for; "" = the user running plumb
  std::string rest_token_file;       // "" = the SLURM_JWT environment variable
  // The Slurm client programs (a name is looked up in PATH).
  std::string sbatch = "sbatch", squeue = "squeue", sacct = "sacct", scancel = "scancel";
};

// Reads the [slurm] table of a TOML file (keys: partition, account, time, gpus, cpus_per_task, mem,
// qos, constraint, extra = [..], rest_url, rest_api, rest_user, rest_token_file) over `base`. InvalidArgument
// naming the file and the key for an unknown key, a wrong type or a negative count; NotFound if the file is
// missing.
Result<SlurmSettings> load_slurm_settings(const std::string& toml_path, SlurmSettings base = {});
// Checks what sbatch would otherwise refuse late: a time limit in Slurm's syntax, no newline in a
// value, extra options that start with "--"; and a rest_url of the form http://host:port with an
// API version of the form vN.N.N. InvalidArgument saying which.
Status validate(const SlurmSettings& s);

// The batch script for a job: #SBATCH lines (job name, output, chdir, then the settings' options
// in the order of SlurmSettings), the job's environment as exports, then `exec` of the command,
// every word shell-quoted.
std::string render_sbatch_script(const JobSpec& spec, const SlurmSettings& s);

// "local" or "slurm" (settings used by slurm only). InvalidArgument for another name, for settings
// validate() refuses, and for a rest_url without a token (rest::token says how to make one).
Result<std::unique_ptr<Executor>> make_executor(const std::string& kind, const SlurmSettings& slurm = {});
std::unique_ptr<Executor> make_local_executor();
std::unique_ptr<Executor> make_slurm_executor(const SlurmSettings& s);

// Slurm's state word (squeue %T / sacct State, e.g. "CANCELLED by 0") as a JobState.
JobState slurm_state(const std::string& word);

// ---- the GPUs of one host ---------------------------------------------------------------------------
//
// `--gpus 0,1,2,3 --gpus-per-trial N` (local executor only; under Slurm, Slurm assigns the cards:
// --slurm-gpus) splits the listed cards, in the order given, into slots of N cards. One job runs on
// one slot, with CUDA_VISIBLE_DEVICES set to the slot's cards, and the slot stays busy until that
// job is final. Cards are the indexes CUDA and nvidia-smi give them on this host.

// The variable NCCL reads to enable NVLink multicast (NVLS). Every environment plumb builds for a
// job sets it to "0", over any value the caller's environment has: NVLink multicast stays off.
inline constexpr const char* kNcclNvlsEnable = "NCCL_NVLS_ENABLE";
// Sets core/subprocess.h's kMulticastOffEnv (kNcclNvlsEnable=0 among them) in `env`, overriding
// values there: what every job script exports.
void set_child_gpu_env(std::map<std::string, std::string>& env);

struct GpuSlot {
  int index = 0;                        // 0-based, in the order of the list
  std::vector<int> cards;               // CUDA device indexes of this host
  std::string visible_devices() const;  // "0,1": the value of CUDA_VISIBLE_DEVICES
};

// Parses `--gpus` ("0,1,2,3") and `--gpus-per-trial` into slots. InvalidArgument saying what to do:
// an empty list or item, a card that is not a non-negative integer, a card listed twice, N < 1, or N
// that does not divide the number of cards.
Result<std::vector<GpuSlot>> gpu_slots(const std::string& gpus, int per_trial);

// Which job holds which slot. Thread-safety: one thread.
class GpuSlotPool {
 public:
  explicit GpuSlotPool(std::vector<GpuSlot> slots) : slots_(std::move(slots)), holder_(slots_.size()) {}
  size_t size() const { return slots_.size(); }
  size_t free_count() const;
  // The lowest-numbered free slot, now held by `job`; nullopt when every slot is busy.
  // InvalidArgument if `job` is empty or already holds a slot.
  Result<std::optional<GpuSlot>> acquire(const std::string& job);
  // Frees the slot `job` holds; nullopt when it holds none (not an error).
  std::optional<GpuSlot> release(const std::string& job);
  // The job holding slot i ("" when free). i < size().
  const std::string& holder(size_t i) const { return holder_.at(i); }

 private:
  std::vector<GpuSlot> slots_;
  std::vector<std::string> holder_;
};

// One card as nvidia-smi describes it.
struct GpuIdentity {
  int index = -1;            // nvidia-smi's index on this host
  std::string name;          // "NVIDIA H100 80GB HBM3"
  std::string uuid;          // "GPU-5f1c..."
  std::string max_sm_clock;  // "1980 MHz", as nvidia-smi printed it
  std::string driver;        // "550.54.15"
};
// The query whose output parse_nvidia_smi reads.
std::vector<std::string> nvidia_smi_query_argv();
// Parses `nvidia-smi --query-gpu=index,name,uuid,clocks.max.sm,driver_version --format=csv,noheader`
// output (a card a line, fields separated by ","). InvalidArgument naming the line for a line with
// another number of fields or an index that is not a number; empty text gives no cards.
Result<std::vector<GpuIdentity>> parse_nvidia_smi(const std::string& text);

// Where a job ran: the host, the cards it was given and their identities, or why the identities are
// unavailable (nvidia-smi not found, failed, or printed what parse_nvidia_smi refuses). Never
// invented: a card nvidia-smi did not list is not in `gpus`.
struct DeviceProvenance {
  std::string host;
  std::string cuda_visible_devices;  // as the job saw it; "" when unset
  std::vector<GpuIdentity> gpus;     // the visible cards (every card of the host when unset)
  std::string unavailable;           // "" when read; else "gpu identity unavailable: <why>"
  std::string nccl_nvls_enable;      // NCCL_NVLS_ENABLE as the job saw it; "" when unset
  // {"host", "cuda_visible_devices", "gpus": [{index, name, uuid, max_sm_clock, driver}],
  //  "gpu_identity": "ok" | the unavailable text, "nccl_nvls_enable"}
  json::object to_json() const;
  // "host h, cards 0,1 (NVIDIA H100 GPU-ab12..., ...)": one line for reports.
  std::string summary() const;
};
// Reads this process's DeviceProvenance: gethostname, CUDA_VISIBLE_DEVICES, NCCL_NVLS_ENABLE, and
// `nvidia_smi` (argv[0] looked up in PATH) run with nvidia_smi_query_argv()'s arguments; cards filtered to
// the visible ones when CUDA_VISIBLE_DEVICES lists indexes. Never fails: what cannot be read is said.
DeviceProvenance device_provenance(const std::string& nvidia_smi = "nvidia-smi");
// The same with its inputs given (for tests): the host, CUDA_VISIBLE_DEVICES, and nvidia-smi's
// output or the error running it gave.
DeviceProvenance device_provenance_from(const std::string& host, const std::string& visible,
                                        const Result<std::string>& smi_output);

}  // namespace plumb::executor
