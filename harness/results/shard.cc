#include "harness/results/shard.h"

#include <charconv>
#include <cstdlib>
#include <utility>

namespace faultline::harness {
namespace {

using getenv_fn_t = const char* (*)(const char*);

bool parse_u64(std::string_view s, std::uint64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

core::result<shard> make(std::uint64_t index, std::uint64_t count, std::string_view what) {
  if (count == 0) return core::status(core::errc::invalid_argument, std::string(what) + ": shard count must be at least 1");
  if (index >= count)
    return core::status(core::errc::invalid_argument,
                        std::string(what) + ": shard index " + std::to_string(index) +
                            " is not below the shard count " + std::to_string(count));
  return shard{index, count};
}

core::status invalid(std::string message) { return {core::errc::invalid_argument, std::move(message)}; }

const char* const use_flag = ", or give the shard with --shard i/n";

// Reads variables through the caller's getenv, recording every one that is set.
class env_reader {
 public:
  explicit env_reader(getenv_fn_t fn) : fn_(fn) {}

  const char* get(const char* name) {
    const char* v = fn_ ? fn_(name) : std::getenv(name);
    if (v) consumed_.emplace_back(name);
    return v;
  }
  std::vector<std::string>& consumed() { return consumed_; }

 private:
  getenv_fn_t fn_;
  std::vector<std::string> consumed_;
};

std::string setting(const char* name, const char* value) { return std::string(name) + "=" + value; }

core::result<std::uint64_t> number(const char* name, const char* value) {
  std::uint64_t n = 0;
  if (!parse_u64(value, n))
    return invalid(std::string(name) + "='" + value + "': expected a non-negative integer");
  return n;
}

// One scheduler's answer.
struct found {
  shard part;
  std::string source;
};
using maybe_found = core::result<std::optional<found>>;

core::result<found> checked(std::uint64_t index, std::uint64_t count, std::string source) {
  auto s = make(index, count, source);
  if (!s) return s.error();
  return found{*s, std::move(source)};
}

maybe_found from_gtest(env_reader& env) {
  const char* total = env.get("GTEST_TOTAL_SHARDS");
  const char* index = env.get("GTEST_SHARD_INDEX");
  if (!total && !index) return std::optional<found>();
  if (!total || !index)
    return invalid(std::string("GTEST_TOTAL_SHARDS and GTEST_SHARD_INDEX must be set together (only ") +
                   (total ? setting("GTEST_TOTAL_SHARDS", total) : setting("GTEST_SHARD_INDEX", index)) + " is)");
  auto n = number("GTEST_TOTAL_SHARDS", total);
  if (!n) return n.error();
  auto i = number("GTEST_SHARD_INDEX", index);
  if (!i) return i.error();
  auto f = checked(*i, *n, setting("GTEST_SHARD_INDEX", index) + " of " + setting("GTEST_TOTAL_SHARDS", total));
  if (!f) return f.error();
  return std::optional<found>(std::move(*f));
}

// Kubernetes gives each pod of an Indexed Job its index (also in the pod's annotation
// batch.kubernetes.io/job-completion-index) but not the Job's completion count.
maybe_found from_indexed_job(env_reader& env) {
  const char* index = env.get("JOB_COMPLETION_INDEX");
  const char* count = env.get("FAULTLINE_SHARD_COUNT");
  if (!index && !count) return std::optional<found>();
  if (!count)
    return invalid(setting("JOB_COMPLETION_INDEX", index) +
                   " (a Kubernetes Indexed Job) is set but FAULTLINE_SHARD_COUNT is not: Kubernetes does not tell a pod"
                   " how many completions its Job has; set FAULTLINE_SHARD_COUNT in the pod template to the Job's"
                   " spec.completions" + use_flag);
  if (!index)
    return invalid(setting("FAULTLINE_SHARD_COUNT", count) +
                   " is set but JOB_COMPLETION_INDEX is not: FAULTLINE_SHARD_COUNT is the shard count of a Kubernetes"
                   " Indexed Job's pods; unset it, or give the shard with --shard i/n");
  auto n = number("FAULTLINE_SHARD_COUNT", count);
  if (!n) return n.error();
  auto i = number("JOB_COMPLETION_INDEX", index);
  if (!i) return i.error();
  auto f = checked(*i, *n, setting("JOB_COMPLETION_INDEX", index) + " of " + setting("FAULTLINE_SHARD_COUNT", count));
  if (!f) return invalid(f.error().message() + " (FAULTLINE_SHARD_COUNT must equal the Job's spec.completions)");
  return std::optional<found>(std::move(*f));
}

// A Slurm array's task ids are MIN, MIN+STEP, ..., MIN+(COUNT-1)*STEP when it was submitted as a
// range (--array=1-8, 0-15:2); a list (--array=1,3,7) has ids no arithmetic maps onto 0..COUNT-1,
// which MAX (when set) or the id itself gives away. STEP is 1 where Slurm does not set it.
maybe_found from_slurm_array(env_reader& env) {
  const char* id_text = env.get("SLURM_ARRAY_TASK_ID");
  if (!id_text) return std::optional<found>();
  const char* count_text = env.get("SLURM_ARRAY_TASK_COUNT");
  const char* min_text = env.get("SLURM_ARRAY_TASK_MIN");
  const char* step_text = env.get("SLURM_ARRAY_TASK_STEP");
  const char* max_text = env.get("SLURM_ARRAY_TASK_MAX");
  const std::string id_set = setting("SLURM_ARRAY_TASK_ID", id_text);
  for (auto [name, text] : {std::pair{"SLURM_ARRAY_TASK_COUNT", count_text}, std::pair{"SLURM_ARRAY_TASK_MIN", min_text}})
    if (!text) return invalid(id_set + " is set but " + name + " is not, so the shard is unknown: give it with --shard i/n");
  auto id = number("SLURM_ARRAY_TASK_ID", id_text);
  if (!id) return id.error();
  auto count = number("SLURM_ARRAY_TASK_COUNT", count_text);
  if (!count) return count.error();
  auto min = number("SLURM_ARRAY_TASK_MIN", min_text);
  if (!min) return min.error();
  std::uint64_t step = 1;
  if (step_text) {
    auto s = number("SLURM_ARRAY_TASK_STEP", step_text);
    if (!s) return s.error();
    if (*s == 0) return invalid(setting("SLURM_ARRAY_TASK_STEP", step_text) + ": expected a step of at least 1");
    step = *s;
  }
  std::string source = id_set + " of " + setting("SLURM_ARRAY_TASK_COUNT", count_text);
  if (*min != 0 || step != 1) {
    source += " (" + setting("SLURM_ARRAY_TASK_MIN", min_text);
    if (step_text) source += ", " + setting("SLURM_ARRAY_TASK_STEP", step_text);
    source += ")";
  }
  // Said when the ids are not a range; `max_set` is SLURM_ARRAY_TASK_MAX's setting where it told.
  auto uneven = [&](const std::string& max_set) {
    return invalid(source + (max_set.empty() ? "" : " with " + max_set) +
                   ": the array's task ids are not evenly spaced from SLURM_ARRAY_TASK_MIN (a list such as"
                   " --array=1,3,7?); submit a range such as --array=0-" + std::to_string(*count - 1) + use_flag);
  };
  if (*count == 0) return invalid(source + ": shard count must be at least 1");
  if (*id < *min || (*id - *min) % step != 0) return uneven("");
  if (max_text) {
    auto max = number("SLURM_ARRAY_TASK_MAX", max_text);
    if (!max) return max.error();
    if (*max < *min || (*max - *min) % step != 0 || (*max - *min) / step != *count - 1)
      return uneven(setting("SLURM_ARRAY_TASK_MAX", max_text));
  }
  auto f = checked((*id - *min) / step, *count, std::move(source));
  if (!f) return f.error();
  return std::optional<found>(std::move(*f));
}

}  // namespace

std::uint64_t owned_runs(std::uint64_t total, const shard& part) {
  if (part.count == 0 || part.index >= part.count) return 0;
  return total / part.count + (part.index < total % part.count ? 1 : 0);
}

std::string shard::to_string() const { return std::to_string(index) + "/" + std::to_string(count); }

core::result<shard> parse_shard(std::string_view text) {
  std::string what = "--shard '" + std::string(text) + "'";
  auto slash = text.find('/');
  std::uint64_t i = 0, n = 0;
  if (slash == std::string_view::npos || !parse_u64(text.substr(0, slash), i) || !parse_u64(text.substr(slash + 1), n))
    return core::status(core::errc::invalid_argument, what + ": expected INDEX/COUNT, e.g. 0/4");
  return make(i, n, what);
}

core::result<std::optional<shard>> shard_from_env(const char* (*getenv_fn)(const char*)) {
  env_reader env(getenv_fn);
  auto f = from_gtest(env);
  if (!f) return f.error();
  if (!*f) return std::optional<shard>();
  return std::optional<shard>((*f)->part);
}

core::result<std::optional<scheduled_shard>> shard_from_scheduler(const char* (*getenv_fn)(const char*)) {
  env_reader env(getenv_fn);
  std::optional<scheduled_shard> out;
  for (auto* read : {&from_gtest, &from_indexed_job, &from_slurm_array}) {
    auto f = (*read)(env);
    if (!f) return f.error();
    if (!*f) continue;
    if (!out) {
      out = scheduled_shard{(*f)->part, std::move((*f)->source), {}};
      continue;
    }
    if ((*f)->part.index != out->part.index || (*f)->part.count != out->part.count)
      return invalid("the schedulers' variables name different shards: " + out->source + " (shard " +
                     out->part.to_string() + ") but " + (*f)->source + " (shard " + (*f)->part.to_string() +
                     "); unset one of them or give the shard with --shard i/n");
    out->source += "; " + (*f)->source;
  }
  if (out) out->consumed = std::move(env.consumed());
  return out;
}

}  // namespace faultline::harness
