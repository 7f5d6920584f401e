// slurmrestd calls and the reading of its answers (slurm_rest.h).
#include "executor/slurm_rest.h"

#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "core/file.h"
#include "core/json.h"
#include "net/http_client.h"

namespace plumb::executor::rest {
namespace {

constexpr int64_t kInvalidJobId = 2017;  // ESLURM_INVALID_JOB_ID

const char* kTokenAdvice =
    "make one with `scontrol token lifespan=SECONDS` (it prints SLURM_JWT=...) and export it as SLURM_JWT, "
    "or write it to the file [slurm].rest_token_file names";

// "description (error)" of every entry of the answer's "errors", "" when there are none.
std::string errors_text(const json::object& o, bool* invalid_job_id) {
  std::string text;
  const auto* errs = o.if_contains("errors");
  if (!errs || !errs->is_array()) return text;
  for (const auto& e : errs->as_array()) {
    if (!e.is_object()) continue;
    const auto& eo = e.as_object();
    auto num = json::number_at(eo, "error_number");
    std::string desc = json::string_at(eo, "description").value_or("");
    std::string err = json::string_at(eo, "error").value_or("");
    if (invalid_job_id && ((num && int64_t(*num) == kInvalidJobId) || err == "Invalid job id specified"))
      *invalid_job_id = true;
    if (!text.empty()) text += "; ";
    text += desc.empty() ? err : desc + (err.empty() ? "" : " (" + err + ")");
  }
  return text;
}

Result<json::object> answer(std::string_view body) {
  auto o = json::parse_object(body);
  if (!o.ok())
    return invalid_argument("slurmrestd's answer is not JSON (" + o.status().message() +
                            "): " + std::string(body.substr(0, 200)));
  return *o;
}

// v0.0.38: "FAILED"; v0.0.40 and later: ["FAILED"] (with flags after the base state).
std::string state_word(const json::value* v) {
  if (!v) return "";
  if (v->is_string()) return std::string(v->as_string());
  if (v->is_array() && !v->as_array().empty() && v->as_array()[0].is_string())
    return std::string(v->as_array()[0].as_string());
  return "";
}

// v0.0.38: a wait status (768 = exit code 3); later: {"status": [...], "return_code": {"number": 3}}
// or a plain number in "return_code".
std::string exit_text(const json::value* v) {
  if (!v) return "";
  if (v->is_int64() || v->is_uint64()) {
    int64_t w = v->is_int64() ? v->as_int64() : int64_t(v->as_uint64());
    if (w == 0) return "";
    if ((w & 0x7f) == 0) return "exit code " + std::to_string((w >> 8) & 0xff);
    return "signal " + std::to_string(w & 0x7f);
  }
  if (!v->is_object()) return "";
  const auto& o = v->as_object();
  const auto* rc = o.if_contains("return_code");
  std::optional<double> n;
  if (rc && rc->is_object()) n = json::number_at(rc->as_object(), "number");
  if (rc && (rc->is_int64() || rc->is_uint64())) n = json::number_at(o, "return_code");
  if (n && *n != 0) return "exit code " + std::to_string(int64_t(*n));
  return "";
}

std::string job_id_text(const json::object& job) {
  auto n = json::number_at(job, "job_id");
  return n ? std::to_string(int64_t(*n)) : "";
}

}  // namespace

Result<std::string> token(const SlurmSettings& s) {
  if (!s.rest_token_file.empty()) {
    auto text = read_file(s.rest_token_file);
    if (!text.ok())
      return invalid_argument("cannot read the slurmrestd token file " + s.rest_token_file + ": " +
                              text.status().message() + "; " + kTokenAdvice);
    std::string t = text->substr(0, text->find('\n'));
    if (t.rfind("SLURM_JWT=", 0) == 0) t = t.substr(10);
    if (t.empty())
      return invalid_argument("the slurmrestd token file " + s.rest_token_file + " is empty; " +
                              kTokenAdvice);
    return t;
  }
  const char* env = std::getenv("SLURM_JWT");
  if (!env || !*env)
    return invalid_argument("slurmrestd at " + s.rest_url +
                            " needs a token and SLURM_JWT is not set: " + kTokenAdvice);
  return std::string(env);
}

std::string user(const SlurmSettings& s) {
  if (!s.rest_user.empty()) return s.rest_user;
  if (const passwd* pw = ::getpwuid(::getuid())) return pw->pw_name;
  return std::to_string(::getuid());
}

Result<Reply> call(const SlurmSettings& s, std::string_view method, const std::string& path) {
  PLUMB_ASSIGN_OR_RETURN(std::string tok, token(s));
  std::string url = s.rest_url + "/slurm/" + s.rest_api + path;
  net::Headers h{{"X-SLURM-USER-NAME", user(s)}, {"X-SLURM-USER-TOKEN", tok}, {"Accept", "application/json"}};
  auto r = net::http_request(url, method, {}, std::chrono::milliseconds(30'000), std::move(h));
  if (!r.ok())
    return unavailable("slurmrestd at " + s.rest_url + " did not answer " + std::string(method) + " " + path +
                       ": " + r.status().message());
  if (r->status == 401)
    return unavailable("slurmrestd at " + s.rest_url + " refused the token for user " + user(s) +
                       " (HTTP 401: expired, or made for another user?); " + kTokenAdvice);
  if (r->status == 404)
    return unavailable("slurmrestd at " + s.rest_url + " has no " + path + " in API " + s.rest_api +
                       " (HTTP 404): set [slurm].rest_api to a version it serves (slurmrestd -s list)");
  return Reply{r->status, std::move(r->body)};
}

Result<std::optional<JobStatus>> job_status(std::string_view body, const std::string& job_id) {
  PLUMB_ASSIGN_OR_RETURN(json::object o, answer(body));
  bool unknown = false;
  std::string errs = errors_text(o, &unknown);
  const auto* jobs = o.if_contains("jobs");
  if (jobs && jobs->is_array()) {
    for (const auto& j : jobs->as_array()) {
      if (!j.is_object() || job_id_text(j.as_object()) != job_id) continue;
      const auto& job = j.as_object();
      JobStatus st;
      st.scheduler_state = state_word(job.if_contains("job_state"));
      st.state = slurm_state(st.scheduler_state);
      st.node = json::string_at(job, "nodes").value_or("");
      std::string reason = json::string_at(job, "state_reason").value_or("");
      std::string detail = reason == "None" ? "" : reason;
      std::string ex = exit_text(job.if_contains("exit_code"));
      if (!ex.empty()) detail += (detail.empty() ? "" : ", ") + ex;
      if (!detail.empty()) st.detail = "slurmrestd: " + detail;
      return std::optional<JobStatus>(st);
    }
  }
  if (unknown) return std::optional<JobStatus>();
  if (!errs.empty())
    return unavailable("slurmrestd could not report job " + job_id + ": " + errs +
                       " (an invalid or expired token is reported this way too)");
  if (!jobs || !jobs->is_array()) return invalid_argument("slurmrestd's answer has no \"jobs\" list");
  return std::optional<JobStatus>();
}

Result<std::optional<std::string>> job_named(std::string_view body, const std::string& name) {
  PLUMB_ASSIGN_OR_RETURN(json::object o, answer(body));
  std::string errs = errors_text(o, nullptr);
  const auto* jobs = o.if_contains("jobs");
  if (!jobs || !jobs->is_array()) {
    if (!errs.empty()) return unavailable("slurmrestd could not list jobs: " + errs);
    return invalid_argument("slurmrestd's answer has no \"jobs\" list");
  }
  std::optional<int64_t> best;
  for (const auto& j : jobs->as_array()) {
    if (!j.is_object() || json::string_at(j.as_object(), "name").value_or("") != name) continue;
    auto id = json::number_at(j.as_object(), "job_id");
    if (id && (!best || int64_t(*id) > *best)) best = int64_t(*id);
  }
  if (!best && !errs.empty()) return unavailable("slurmrestd could not list jobs: " + errs);
  return best ? std::optional<std::string>(std::to_string(*best)) : std::nullopt;
}

Status cancelled(std::string_view body, const std::string& job_id) {
  PLUMB_ASSIGN_OR_RETURN(json::object o, answer(body));
  bool unknown = false;
  std::string errs = errors_text(o, &unknown);
  if (errs.empty() || unknown || errs.find("already completing or completed") != std::string::npos)
    return Status::Ok();
  return unavailable("slurmrestd could not cancel job " + job_id + ": " + errs);
}

}  // namespace plumb::executor::rest
