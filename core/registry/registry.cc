#include "core/registry/registry.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "core/registry/detail/instance.h"
#include "core/registry/detail/worker.h"
#include "core/points/point.h"

namespace faultline::core::registry {

namespace detail {

instance::~instance() {
  // Every barrier first, so the workers drain side by side, then one bound for all of them.
  const auto ws = workers();
  for (const auto& w : ws) {
    if (w->thread.joinable()) enqueue(*w, task{});
  }
  std::chrono::steady_clock::time_point deadline{};
  for (const auto& w : ws) {
    if (!w->thread.joinable()) continue;
    if (deadline == std::chrono::steady_clock::time_point{}) deadline = std::chrono::steady_clock::now() + w->core->join_timeout;
    if (wait_exited(*w, deadline) || !abandon(*w)) {
      w->thread.join();
      // Its stream and events were the teardown's to destroy, on its device; no teardown ran.
      device::backend& be = *w->core->backend;
      const auto previous = be.current_device();
      (void)be.set_device(w->device);
      for (const device::event e : w->events) (void)be.destroy_event(e);
      (void)be.destroy_stream(w->stream);
      if (previous) (void)be.set_device(*previous);
    } else {
      w->thread.detach();
    }
  }
}

}  // namespace detail

namespace {

using clock_type = std::chrono::steady_clock;

// Process-wide, so a generation names one registration among every registry of the process.
std::atomic<std::uint64_t> g_next_generation{1};

// The registry's own device calls select devices on the caller's thread; the caller gets its
// current device back.
class device_guard {
 public:
  explicit device_guard(device::backend& be) : be_(be) {
    if (auto d = be_.current_device()) prev_ = *d;
  }
  ~device_guard() {
    if (prev_ >= 0) (void)be_.set_device(prev_);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  device::backend& be_;
  int prev_ = -1;
};

std::string name_of(const detail::instance& inst) {
  return "'" + inst.id + "' (generation " + std::to_string(inst.generation) + ")";
}

status no_instance(std::string_view id) {
  return {errc::not_found, "registry: no instance '" + std::string(id) + "'"};
}

// Caller holds inst.mu.
status refused(const detail::instance& inst) {
  return {errc::refused, "registry: instance " + name_of(inst) + " is being unregistered (" +
                             std::string(to_string(inst.state)) + "); no new work is accepted"};
}

// Caller holds inst.mu. The slot behind a handle, or why the handle is no good.
result<const detail::buffer_slot*> slot_of(const detail::instance& inst, buffer_handle h) {
  if (h.generation != inst.generation) {
    return status(errc::not_found, "registry: stale handle: buffer " + std::to_string(h.index) + " of generation " +
                                       std::to_string(h.generation) + ", but '" + inst.id + "' is generation " +
                                       std::to_string(inst.generation));
  }
  if (h.index >= inst.buffers.size()) {
    return status(errc::invalid_argument, "registry: instance " + name_of(inst) + " has no buffer " +
                                              std::to_string(h.index) + " (" + std::to_string(inst.buffers.size()) +
                                              " buffers)");
  }
  const detail::buffer_slot& s = inst.buffers[h.index];
  if (s.state != detail::slot_state::live) {
    return status(errc::not_found, "registry: buffer " + std::to_string(h.index) + " of instance " + name_of(inst) +
                                       " was released");
  }
  return &s;
}

void publish(detail::instance& inst, unregister_result& r, clock_type::time_point started) {
  {
    std::lock_guard g(inst.mu);
    inst.state = instance_state::removed;
  }
  r.elapsed = clock_type::now() - started;
  {
    std::lock_guard g(inst.done_mu);
    inst.outcome = r;
    inst.done = true;
  }
  inst.done_cv.notify_all();
}

}  // namespace

std::string_view to_string(instance_state s) noexcept {
  switch (s) {
    case instance_state::open: return "open";
    case instance_state::draining: return "draining";
    case instance_state::drained: return "drained";
    case instance_state::removed: return "removed";
  }
  return "unknown";
}

// --- operation -------------------------------------------------------------------------------------

status operation::wait() const {
  if (!state_) return {errc::invalid_argument, "registry: wait on an empty operation"};
  std::unique_lock lk(state_->mu);
  state_->cv.wait(lk, [&] { return state_->done; });
  return state_->result;
}

std::optional<status> operation::wait_for(std::chrono::nanoseconds timeout) const {
  if (!state_) return status(errc::invalid_argument, "registry: wait on an empty operation");
  std::unique_lock lk(state_->mu);
  if (!state_->cv.wait_for(lk, timeout, [&] { return state_->done; })) return std::nullopt;
  return state_->result;
}

bool operation::ready() const noexcept {
  if (!state_) return false;
  std::lock_guard g(state_->mu);
  return state_->done;
}

// --- construction ----------------------------------------------------------------------------------

instance_registry::instance_registry(options opts)
    : join_timeout_(opts.join_timeout), core_(std::make_shared<detail::shared_core>(opts.host_cache_bytes)) {
  core_->join_timeout = join_timeout_;
  backend_ = opts.backend;
  if (backend_ == nullptr) {
    if (auto b = device::select_backend()) {
      backend_ = *b;
    } else {
      backend_error_ = b.error();
    }
  }
  core_->backend = backend_;
  if (opts.resource != nullptr) {
    resource_ = opts.resource;
  } else if (backend_ != nullptr) {
    default_resource_ = std::make_unique<alloc::device_resource>(*backend_);
    resource_ = default_resource_.get();
  }
}

instance_registry::~instance_registry() { (void)unregister_all(); }

instance_registry::instance_ptr instance_registry::lookup(std::string_view id) const {
  std::lock_guard g(map_mu_);
  auto it = map_.find(id);
  return it == map_.end() ? nullptr : it->second;
}

// --- registration ----------------------------------------------------------------------------------

result<registration> instance_registry::register_instance(std::string id, const instance_config& config) {
  if (backend_ == nullptr) return backend_error_;
  if (id.empty()) return status(errc::invalid_argument, "registry: an instance id must not be empty");
  if (config.devices.empty()) {
    return status(errc::invalid_argument, "registry: instance '" + id + "' names no device");
  }
  auto count = backend_->device_count();
  if (!count) return count.error();
  for (std::size_t i = 0; i < config.devices.size(); ++i) {
    const int d = config.devices[i];
    if (d < 0 || d >= *count) {
      return status(errc::invalid_argument, "registry: instance '" + id + "': device " + std::to_string(d) +
                                                " does not exist (" + std::to_string(*count) + " devices)");
    }
    if (std::find(config.devices.begin(), config.devices.begin() + static_cast<std::ptrdiff_t>(i), d) !=
        config.devices.begin() + static_cast<std::ptrdiff_t>(i)) {
      return status(errc::invalid_argument, "registry: instance '" + id + "': device " + std::to_string(d) +
                                                " is listed twice");
    }
  }
  for (std::size_t i = 0; i < config.buffers.size(); ++i) {
    const buffer_spec& b = config.buffers[i];
    if (b.bytes == 0) {
      return status(errc::invalid_argument, "registry: instance '" + id + "': buffer " + std::to_string(i) + " has 0 bytes");
    }
    if (std::find(config.devices.begin(), config.devices.end(), b.device) == config.devices.end()) {
      return status(errc::invalid_argument, "registry: instance '" + id + "': buffer " + std::to_string(i) +
                                                " is on device " + std::to_string(b.device) +
                                                ", which has no workers in this instance");
    }
  }
  auto taken = [&](const instance_ptr& existing) -> status {
    std::lock_guard g(existing->mu);
    if (existing->state != instance_state::open) return {};
    return {errc::already_exists, "registry: instance " + name_of(*existing) + " is registered and open"};
  };
  if (auto existing = lookup(id)) {
    if (auto s = taken(existing); !s) return s;
  }

  auto inst = std::make_shared<detail::instance>(id, g_next_generation.fetch_add(1), config.devices);
  status setup;  // the first failure while building the instance
  {
    device_guard guard(*backend_);
    for (std::size_t i = 0; setup && i < config.devices.size(); ++i) {
      const int d = config.devices[i];
      setup = backend_->set_device(d);
      for (const auto role : {detail::worker_role::save, detail::worker_role::load}) {
        if (!setup) break;
        auto s = backend_->create_stream();
        if (!s) {
          setup = s.error();
          break;
        }
        auto w = std::make_shared<detail::worker_state>(core_, d, role, *s, id, inst->generation);
        (role == detail::worker_role::save ? inst->save_workers : inst->load_workers).push_back(w);
        for (std::size_t e = 0; setup && e < detail::pipeline_depth; ++e) {
          auto ev = backend_->create_event();
          if (ev) {
            w->events.push_back(*ev);
          } else {
            setup = ev.error();
          }
        }
      }
    }
    for (std::size_t i = 0; setup && i < config.buffers.size(); ++i) {
      const buffer_spec& b = config.buffers[i];
      setup = backend_->set_device(b.device);
      if (!setup) break;
      auto p = resource_->allocate(b.bytes, device::stream{});
      if (!p) {
        setup = p.error();
        break;
      }
      inst->buffers.push_back({static_cast<std::byte*>(*p), b.bytes, b.device, detail::slot_state::live});
      core_->buffers_live.fetch_add(1, std::memory_order_relaxed);
      core_->bytes_live.fetch_add(b.bytes, std::memory_order_relaxed);
    }
  }
  for (const auto& w : inst->workers()) {
    if (!setup) break;
    setup = detail::start_worker(w);
  }
  if (!setup) {
    discard(*inst);
    return setup;
  }

  status claim;  // whether the id is ours
  {
    std::lock_guard g(map_mu_);
    auto it = map_.find(id);
    if (it != map_.end()) claim = taken(it->second);
    // An instance being torn down gives its id up: its owner holds it, releases only its own
    // generation, and removes the entry only if it still holds that generation.
    if (claim) map_.insert_or_assign(id, inst);
  }
  if (!claim) {
    discard(*inst);
    return claim;
  }
  core_->registrations.fetch_add(1, std::memory_order_relaxed);
  (void)FAULTLINE_POINT("registry/register/after-insert");
  registration r;
  r.generation = inst->generation;
  for (std::uint32_t i = 0; i < inst->buffers.size(); ++i) r.buffers.push_back({inst->generation, i});
  return r;
}

// A registration that never entered the map (its setup failed, or it lost the id): nothing else
// can reach it, so it is taken apart at once.
void instance_registry::discard(detail::instance& inst) {
  const auto ws = inst.workers();
  for (const auto& w : ws) {
    if (w->thread.joinable()) detail::enqueue(*w, detail::task{});
  }
  for (const auto& w : ws) {
    if (w->thread.joinable()) w->thread.join();
  }
  {
    device_guard guard(*backend_);
    for (const auto& w : ws) {
      (void)backend_->set_device(w->device);
      for (const device::event e : w->events) (void)backend_->destroy_event(e);
      (void)backend_->destroy_stream(w->stream);
    }
  }
  unregister_result scratch;
  release_buffers(inst, scratch);
}

// --- work ------------------------------------------------------------------------------------------

result<operation> instance_registry::submit(std::string_view id, bool is_save, buffer_handle handle,
                                            std::size_t offset, std::size_t bytes, std::uint64_t key,
                                            std::optional<std::uint64_t> sum) {
  instance_ptr inst = lookup(id);
  if (!inst) return no_instance(id);
  std::shared_ptr<detail::worker_state> w;
  std::byte* ptr = nullptr;
  std::size_t room = 0;
  {
    std::lock_guard g(inst->mu);
    if (inst->state != instance_state::open) {
      core_->submits_refused.fetch_add(1, std::memory_order_relaxed);
      return refused(*inst);
    }
    auto slot = slot_of(*inst, handle);
    if (!slot) return slot.error();
    const detail::buffer_slot& s = **slot;
    if (is_save && (bytes == 0 || offset > s.bytes || bytes > s.bytes - offset)) {
      return status(errc::invalid_argument, "registry: save of " + std::to_string(bytes) + " bytes at offset " +
                                                std::to_string(offset) + " of a " + std::to_string(s.bytes) +
                                                "-byte buffer");
    }
    if (!is_save && offset >= s.bytes) {
      return status(errc::invalid_argument, "registry: load at offset " + std::to_string(offset) + " of a " +
                                                std::to_string(s.bytes) + "-byte buffer");
    }
    ptr = s.ptr + offset;
    room = is_save ? bytes : s.bytes - offset;
    const auto pos = static_cast<std::size_t>(std::find(inst->devices.begin(), inst->devices.end(), s.device) -
                                              inst->devices.begin());
    w = is_save ? inst->save_workers[pos] : inst->load_workers[pos];
    ++inst->inflight;  // the teardown queues its barrier only once this drops back to 0
  }
  (void)FAULTLINE_POINT(is_save ? "registry/save/after-check" : "registry/load/after-check");
  auto op = std::make_shared<detail::op_state>();
  detail::enqueue(*w, detail::task{is_save ? detail::task_kind::save : detail::task_kind::load, op, ptr, room, key, sum});
  {
    std::lock_guard g(inst->mu);
    if (--inst->inflight == 0) inst->gate_cv.notify_all();
  }
  return operation(std::move(op), inst->generation);
}

result<operation> instance_registry::save(std::string_view id, const save_request& request) {
  return submit(id, true, request.buffer, request.offset, request.bytes, request.key, request.checksum);
}

result<operation> instance_registry::load(std::string_view id, const load_request& request) {
  return submit(id, false, request.buffer, request.offset, 0, request.key, request.checksum);
}

result<buffer_info> instance_registry::buffer(std::string_view id, buffer_handle handle) const {
  instance_ptr inst = lookup(id);
  if (!inst) return no_instance(id);
  std::lock_guard g(inst->mu);
  auto slot = slot_of(*inst, handle);
  if (!slot) return slot.error();
  return buffer_info{(*slot)->ptr, (*slot)->bytes, (*slot)->device};
}

// --- leases and blocks -----------------------------------------------------------------------------

status instance_registry::acquire_lease(std::string_view id, std::uint64_t key) {
  instance_ptr inst = lookup(id);
  if (!inst) return no_instance(id);
  {
    std::lock_guard g(inst->mu);
    if (inst->state != instance_state::open) {
      core_->submits_refused.fetch_add(1, std::memory_order_relaxed);
      return refused(*inst);
    }
    ++inst->inflight;
  }
  status s = core_->store.pin(key);
  std::lock_guard g(inst->mu);
  if (s) ++inst->leases[key];
  if (--inst->inflight == 0) inst->gate_cv.notify_all();
  return s;
}

status instance_registry::release_lease(std::string_view id, std::uint64_t key) {
  instance_ptr inst = lookup(id);
  if (!inst) return no_instance(id);
  {
    std::lock_guard g(inst->mu);
    auto it = inst->leases.find(key);
    if (it == inst->leases.end()) {
      return {errc::not_found, "registry: instance " + name_of(*inst) + " holds no lease on block " + std::to_string(key)};
    }
    if (--it->second == 0) inst->leases.erase(it);
  }
  core_->store.unpin(key, 1);
  return {};
}

result<block_info> instance_registry::block(std::uint64_t key) const {
  auto info = core_->store.info(key);
  if (!info) return status(errc::not_found, "registry: no stored block " + std::to_string(key));
  return *info;
}

result<std::vector<std::byte>> instance_registry::read_block(std::uint64_t key) const {
  auto b = core_->store.get(key);
  if (!b) return status(errc::not_found, "registry: no stored block " + std::to_string(key));
  if (const std::uint64_t sum = checksum(b->data.get(), b->bytes); sum != b->checksum) {
    return status(errc::corrupt, "registry: stored block " + std::to_string(key) + " hashes to " + std::to_string(sum) +
                                     ", stored with " + std::to_string(b->checksum));
  }
  return std::vector<std::byte>(b->data.get(), b->data.get() + b->bytes);
}

status instance_registry::erase_block(std::uint64_t key) { return core_->store.erase(key); }

// --- teardown --------------------------------------------------------------------------------------

unregister_result instance_registry::unregister_instance(std::string_view id) {
  return unregister_instance(id, join_timeout_);
}

unregister_result instance_registry::unregister_instance(std::string_view id, std::chrono::milliseconds join_timeout) {
  const auto started = clock_type::now();
  const bool bug_release = FAULTLINE_BUG("bug/registry/release-before-drain");
  const bool bug_by_id = FAULTLINE_BUG("bug/registry/cleanup-by-id");
  detail::teardown_plan plan;
  instance_ptr owner_elsewhere;
  {
    std::lock_guard g(map_mu_);
    auto it = map_.find(id);
    if (it == map_.end()) {
      unregister_result r;
      r.status = no_instance(id);
      r.id = std::string(id);
      return r;
    }
    instance_ptr inst = it->second;
    std::lock_guard gi(inst->mu);
    if (inst->state == instance_state::open) {
      inst->state = instance_state::draining;
      plan.inst = inst;
      if (bug_by_id) {
        // Pre-fix: the id was removed first, so a same-id registration could land during the join.
        map_.erase(it);
        plan.removed_early = true;
      }
    } else {
      ++inst->waiters;
      owner_elsewhere = inst;
    }
  }
  if (owner_elsewhere) return wait_for_owner(owner_elsewhere, started);
  plan.started = started;
  plan.bug_release_before_drain = bug_release;
  plan.bug_cleanup_by_id = bug_by_id;
  const auto deadline = started + join_timeout;
  begin_teardown(plan, deadline);
  return finish_teardown(plan, deadline);
}

// The owner's first half: the instance is already marked draining.
void instance_registry::begin_teardown(detail::teardown_plan& plan, clock_type::time_point deadline) {
  detail::instance& inst = *plan.inst;
  unregister_result& r = plan.result;
  r.id = inst.id;
  r.generation = inst.generation;
  r.owner = true;
  (void)FAULTLINE_POINT("registry/unregister/after-mark");
  if (plan.bug_release_before_drain) {
    // Pre-fix: the buffers went back first, with tasks still queued that copy from them.
    release_buffers(inst, r);
    plan.released_early = true;
  }
  {
    // Submits that passed their check before the mark queue their task now; the barrier must go
    // behind them.
    std::unique_lock lk(inst.mu);
    inst.gate_cv.wait_until(lk, deadline, [&] { return inst.inflight == 0; });
  }
  for (const auto& w : inst.workers()) detail::enqueue(*w, detail::task{});
}

unregister_result instance_registry::finish_teardown(detail::teardown_plan& plan, clock_type::time_point deadline) {
  detail::instance& inst = *plan.inst;
  unregister_result& r = plan.result;
  (void)FAULTLINE_POINT("registry/unregister/joining");
  const auto ws = inst.workers();
  std::vector<bool> exited(ws.size(), false);
  bool all_exited = true;
  for (std::size_t i = 0; i < ws.size(); ++i) {
    // A worker still running at the deadline is given up (it cleans up after itself); one that
    // ended just then is joined as usual.
    exited[i] = detail::wait_exited(*ws[i], deadline) || !detail::abandon(*ws[i]);
    all_exited = all_exited && exited[i];
  }
  for (std::size_t i = 0; i < ws.size(); ++i) {
    detail::worker_state& w = *ws[i];
    std::vector<detail::task> pending = detail::take_pending(w);
    if (exited[i]) {
      w.thread.join();
      // Only a submit whose gate wait ran past the deadline can have queued behind the barrier.
      for (auto& t : pending) {
        core_->tasks_failed.fetch_add(1, std::memory_order_relaxed);
        t.op->complete(status(errc::refused, "registry: task queued after " + detail::describe(w) +
                                                 " passed its drain barrier; not run"));
      }
    } else {
      r.tasks_abandoned += pending.size();
      core_->tasks_abandoned.fetch_add(pending.size(), std::memory_order_relaxed);
      for (auto& t : pending) {
        t.op->complete(status(errc::timeout, "registry: " + detail::describe(w) + " was still running when its "
                                             "teardown's join bound expired; queued task not run"));
      }
      w.thread.detach();  // it holds its own state; it ends at its barrier and cleans up
    }
  }
  r.drained = all_exited;
  if (all_exited) {
    std::lock_guard g(inst.mu);
    inst.state = instance_state::drained;
  }
  (void)FAULTLINE_POINT("registry/unregister/after-join");
  for (const auto& w : ws) {
    if (!r.worker_error.is_ok()) break;
    r.worker_error = detail::error_of(*w);
  }

  status cleanup;
  {
    device_guard guard(*backend_);
    for (std::size_t i = 0; i < ws.size(); ++i) {
      if (!exited[i]) continue;  // abandoned: it destroys its stream and events when it ends
      const auto& w = ws[i];
      (void)backend_->set_device(w->device);
      status s = backend_->synchronize_stream(w->stream);
      for (const device::event e : w->events) {
        if (status d = backend_->destroy_event(e); s) s = d;
      }
      if (status d = backend_->destroy_stream(w->stream); s) s = d;
      if (!s && cleanup) cleanup = s;
    }
  }

  if (!r.worker_error.is_ok() && FAULTLINE_BUG("bug/registry/early-return-on-worker-error")) {
    // Pre-fix: `join()?` handed the worker's error back at once. The workers' own resources went
    // with them (their streams, as Drop would), but the instance was already gone from the map
    // and the buffers and leases it held in the registry's tables were never released.
    if (!plan.removed_early) erase_entry(inst.id, &inst);
    r.status = r.worker_error;
    r.removed = true;
    publish(inst, r, plan.started);
    return r;
  }

  detail::instance* target = &inst;
  instance_ptr holder;
  if (plan.removed_early) {
    // Pre-fix: the cleanup looked the id up again and released whatever held it now.
    holder = lookup(inst.id);
    if (holder) target = holder.get();
  }
  if (!plan.released_early) {
    if (all_exited) {
      release_buffers(*target, r);
    } else {
      leak_buffers(*target, r);
    }
  }
  r.leases_released = release_leases(*target);
  erase_entry(inst.id, plan.removed_early ? nullptr : &inst);
  if (auto now_holding = lookup(inst.id)) r.replaced = now_holding.get() != &inst;
  r.removed = true;
  (void)FAULTLINE_POINT("registry/unregister/after-remove");

  if (!all_exited) {
    r.status = status(errc::timeout, "registry: unregister of " + name_of(inst) + ": worker(s) still running after the " +
                                         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                            deadline - plan.started).count()) +
                                         " ms join bound; " + std::to_string(r.buffers_leaked) + " buffer(s) (" +
                                         std::to_string(r.bytes_leaked) + " bytes) leaked rather than freed under them, " +
                                         std::to_string(r.tasks_abandoned) + " queued task(s) failed");
  } else if (!r.worker_error.is_ok()) {
    r.status = status(r.worker_error.code(),
                      "registry: unregister of " + name_of(inst) + " completed its cleanup after a worker failure: " +
                          r.worker_error.message(),
                      r.worker_error.injected());
  } else if (r.status.is_ok()) {
    r.status = cleanup;  // (a failed release already put its error there)
  }
  publish(inst, r, plan.started);
  return r;
}

unregister_result instance_registry::wait_for_owner(const instance_ptr& inst, clock_type::time_point started) {
  (void)FAULTLINE_POINT("registry/unregister/concurrent");
  unregister_result r;
  if (FAULTLINE_BUG("bug/registry/unsynchronized-concurrent-unregister")) {
    // Pre-fix: "already being removed" was taken for "removed", and the caller went on at once.
    {
      std::lock_guard g(inst->mu);
      --inst->waiters;
    }
    r.id = inst->id;
    r.generation = inst->generation;
    r.removed = true;
    r.drained = true;
    r.elapsed = clock_type::now() - started;
    return r;
  }
  {
    std::unique_lock lk(inst->done_mu);
    inst->done_cv.wait(lk, [&] { return inst->done; });
    r = inst->outcome;
  }
  {
    std::lock_guard g(inst->mu);
    --inst->waiters;
  }
  r.owner = false;
  r.elapsed = clock_type::now() - started;
  return r;
}

unregister_all_result instance_registry::unregister_all() { return unregister_all(join_timeout_); }

unregister_all_result instance_registry::unregister_all(std::chrono::milliseconds join_timeout) {
  unregister_all_result out;
  // Registrations made during the call are torn down by the next round; a few rounds bound it.
  for (int round = 0; round < 8; ++round) {
    const auto started = clock_type::now();
    std::vector<detail::teardown_plan> owned;
    std::vector<instance_ptr> elsewhere;
    {
      std::lock_guard g(map_mu_);
      if (map_.empty()) break;
      for (auto it = map_.begin(); it != map_.end();) {
        instance_ptr inst = it->second;
        const bool bug_release = FAULTLINE_BUG("bug/registry/release-before-drain");
        const bool bug_by_id = FAULTLINE_BUG("bug/registry/cleanup-by-id");
        bool erase_now = false;
        {
          std::lock_guard gi(inst->mu);
          if (inst->state == instance_state::open) {
            inst->state = instance_state::draining;
            detail::teardown_plan plan;
            plan.inst = inst;
            plan.started = started;
            plan.bug_release_before_drain = bug_release;
            plan.bug_cleanup_by_id = bug_by_id;
            erase_now = plan.removed_early = bug_by_id;
            owned.push_back(std::move(plan));
          } else {
            ++inst->waiters;
            elsewhere.push_back(inst);
          }
        }
        it = erase_now ? map_.erase(it) : std::next(it);
      }
    }
    // Every instance is marked before any is joined, so their drains overlap.
    const auto deadline = started + join_timeout;
    for (auto& plan : owned) begin_teardown(plan, deadline);
    (void)FAULTLINE_POINT("registry/unregister-all/after-mark");
    for (auto& plan : owned) out.results.push_back(finish_teardown(plan, deadline));
    for (const auto& inst : elsewhere) out.results.push_back(wait_for_owner(inst, started));
  }
  {
    std::lock_guard g(map_mu_);
    out.remaining = map_.size();
  }
  for (const auto& r : out.results) {
    if (!r.status.is_ok()) {
      out.status = r.status;
      break;
    }
  }
  if (out.status.is_ok() && out.remaining != 0) {
    out.status = status(errc::busy, "registry: unregister_all: " + std::to_string(out.remaining) +
                                        " instance(s) registered while it ran are still registered");
  }
  return out;
}

void instance_registry::release_buffers(detail::instance& inst, unregister_result& into) {
  std::vector<detail::buffer_slot> live;
  {
    std::lock_guard g(inst.mu);
    for (auto& s : inst.buffers) {
      if (s.state != detail::slot_state::live) continue;
      live.push_back(s);
      s.state = detail::slot_state::released;
    }
  }
  if (live.empty()) return;
  device_guard guard(*backend_);
  for (const auto& s : live) {
    core_->buffers_live.fetch_sub(1, std::memory_order_relaxed);
    core_->bytes_live.fetch_sub(s.bytes, std::memory_order_relaxed);
    (void)backend_->set_device(s.device);
    if (status st = resource_->deallocate(s.ptr, s.bytes, device::stream{}); !st) {
      if (into.status.is_ok()) {
        into.status = status(st.code(), "registry: release of a " + std::to_string(s.bytes) + "-byte buffer of " +
                                            name_of(inst) + ": " + st.message(), st.injected());
      }
      continue;
    }
    ++into.buffers_released;
    into.bytes_released += s.bytes;
  }
}

void instance_registry::leak_buffers(detail::instance& inst, unregister_result& into) {
  std::lock_guard g(inst.mu);
  for (auto& s : inst.buffers) {
    if (s.state != detail::slot_state::live) continue;
    s.state = detail::slot_state::leaked;
    ++into.buffers_leaked;
    into.bytes_leaked += s.bytes;
    core_->buffers_live.fetch_sub(1, std::memory_order_relaxed);
    core_->bytes_live.fetch_sub(s.bytes, std::memory_order_relaxed);
    core_->buffers_leaked.fetch_add(1, std::memory_order_relaxed);
    core_->bytes_leaked.fetch_add(s.bytes, std::memory_order_relaxed);
  }
}

std::size_t instance_registry::release_leases(detail::instance& inst) {
  std::unordered_map<std::uint64_t, std::uint32_t> held;
  {
    std::lock_guard g(inst.mu);
    held.swap(inst.leases);
  }
  std::size_t n = 0;
  for (const auto& [key, count] : held) n += core_->store.unpin(key, count);
  return n;
}

void instance_registry::erase_entry(const std::string& id, const detail::instance* only_if) {
  std::lock_guard g(map_mu_);
  auto it = map_.find(id);
  if (it != map_.end() && (only_if == nullptr || it->second.get() == only_if)) map_.erase(it);
}

// --- queries ---------------------------------------------------------------------------------------

instance_info instance_registry::info_of(const detail::instance& inst) {
  instance_info i;
  i.id = inst.id;
  i.generation = inst.generation;
  i.devices = inst.devices;
  for (const auto& w : inst.workers()) i.queued_tasks += detail::queued(*w);
  std::lock_guard g(inst.mu);
  i.state = inst.state;
  for (const auto& s : inst.buffers) i.buffers_live += s.state == detail::slot_state::live;
  for (const auto& [key, count] : inst.leases) i.leases += count;
  i.unregister_waiters = inst.waiters;
  return i;
}

result<instance_info> instance_registry::find(std::string_view id) const {
  instance_ptr inst = lookup(id);
  if (!inst) return no_instance(id);
  return info_of(*inst);
}

std::vector<instance_info> instance_registry::instances() const {
  std::vector<instance_ptr> all;
  {
    std::lock_guard g(map_mu_);
    for (const auto& [id, inst] : map_) all.push_back(inst);
  }
  std::vector<instance_info> out;
  out.reserve(all.size());
  for (const auto& inst : all) out.push_back(info_of(*inst));
  return out;
}

registry_stats instance_registry::stats() const {
  registry_stats s;
  {
    std::lock_guard g(map_mu_);
    s.instances = map_.size();
  }
  const detail::shared_core& c = *core_;
  s.registrations = c.registrations.load();
  s.buffers_live = c.buffers_live.load();
  s.bytes_live = c.bytes_live.load();
  s.buffers_leaked = c.buffers_leaked.load();
  s.bytes_leaked = c.bytes_leaked.load();
  const auto t = c.store.sum();
  s.blocks = t.blocks;
  s.block_bytes = t.bytes;
  s.leases_outstanding = t.leases;
  s.host_bytes_cached = c.pool.pooled_bytes();
  s.saves_completed = c.saves_completed.load();
  s.loads_completed = c.loads_completed.load();
  s.tasks_failed = c.tasks_failed.load();
  s.tasks_abandoned = c.tasks_abandoned.load();
  s.submits_refused = c.submits_refused.load();
  s.checksum_mismatches = c.checksum_mismatches.load();
  s.worker_errors = c.worker_errors.load();
  s.workers_running = c.workers_running.load();
  return s;
}

}  // namespace faultline::core::registry
