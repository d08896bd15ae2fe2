#include "core/registry/detail/worker.h"

#include <new>
#include <system_error>
#include <utility>

#include "core/points/point.h"

namespace faultline::core::registry::detail {

namespace {

void fail_task(worker_state& w, task& t, status s) {
  w.core->tasks_failed.fetch_add(1, std::memory_order_relaxed);
  t.op->complete(std::move(s));
}

// Records the worker's first failure and returns the status its tasks fail with from now on.
status fail_worker(worker_state& w, const status& cause) {
  std::lock_guard g(w.mu);
  if (w.error.is_ok()) {
    w.error = status(cause.code(), describe(w) + " failed: " + cause.message(), cause.injected());
    w.core->worker_errors.fetch_add(1, std::memory_order_relaxed);
  }
  return w.error;
}

// Checks a task and queues its copy; false when the task was failed instead.
bool start(worker_state& w, task& t, std::size_t slot, in_flight& out) {
  device::backend& be = *w.core->backend;
  if (status earlier = error_of(w); !earlier.is_ok()) {
    fail_task(w, t, std::move(earlier));
    return false;
  }
  if (const int code = FAULTLINE_POINT("registry/worker/task")) {
    fail_task(w, t, fail_worker(w, status::injected_fault("registry/worker/task", code)));
    return false;
  }
  status queued;
  if (t.kind == task_kind::save) {
    auto block = std::make_shared<stored_block>();
    block->data = w.core->pool.take(t.bytes);
    block->pool = &w.core->pool;
    if (!block->data) {
      fail_task(w, t, status(errc::out_of_memory, "registry: no host memory for a " + std::to_string(t.bytes) + "-byte block"));
      return false;
    }
    block->bytes = t.bytes;
    block->saved_by = w.generation;
    queued = be.copy_async(block->data.get(), t.device_ptr, t.bytes, w.stream);
    out.saved = std::move(block);
  } else {
    std::shared_ptr<const stored_block> block = w.core->store.get(t.key);
    if (!block) {
      fail_task(w, t, status(errc::not_found, "registry: load of block " + std::to_string(t.key) + ": not stored"));
      return false;
    }
    const std::uint64_t sum = checksum(block->data.get(), block->bytes);
    if (sum != block->checksum || (t.checksum && *t.checksum != block->checksum)) {
      w.core->checksum_mismatches.fetch_add(1, std::memory_order_relaxed);
      fail_task(w, t, status(errc::corrupt, "registry: load of block " + std::to_string(t.key) + ": stored with checksum " +
                                                std::to_string(block->checksum) + ", its bytes hash to " +
                                                std::to_string(sum) +
                                                (t.checksum ? ", the client expects " + std::to_string(*t.checksum) : "")));
      return false;
    }
    if (block->bytes > t.bytes) {
      fail_task(w, t, status(errc::invalid_argument, "registry: load of block " + std::to_string(t.key) + " (" +
                                                         std::to_string(block->bytes) + " bytes) into " +
                                                         std::to_string(t.bytes) + " bytes of room"));
      return false;
    }
    queued = be.copy_async(t.device_ptr, block->data.get(), block->bytes, w.stream);
    out.loaded = std::move(block);
  }
  // A failed copy or event means the worker's stream can no longer be trusted.
  if (queued) queued = be.record_event(w.events[slot], w.stream);
  if (!queued) {
    fail_task(w, t, fail_worker(w, queued));
    return false;
  }
  out.t = std::move(t);
  out.slot = slot;
  return true;
}

// Waits for a task's copy, then verifies and stores (save) and completes it.
void finish(worker_state& w, in_flight& f) {
  if (auto s = w.core->backend->synchronize_event(w.events[f.slot]); !s) {
    fail_task(w, f.t, fail_worker(w, s));
    return;
  }
  if (f.t.kind == task_kind::load) {
    w.core->loads_completed.fetch_add(1, std::memory_order_relaxed);
    f.t.op->complete({});
    return;
  }
  stored_block& block = *f.saved;
  block.checksum = checksum(block.data.get(), block.bytes);
  if (f.t.checksum && *f.t.checksum != block.checksum) {
    w.core->checksum_mismatches.fetch_add(1, std::memory_order_relaxed);
    fail_task(w, f.t, status(errc::corrupt, "registry: save of block " + std::to_string(f.t.key) + " by " + describe(w) +
                                                ": the copied bytes hash to " + std::to_string(block.checksum) +
                                                ", the client wrote " + std::to_string(*f.t.checksum) +
                                                " (copied from freed or reused memory?); nothing stored"));
    return;
  }
  w.core->store.put(f.t.key, std::move(f.saved));
  w.core->saves_completed.fetch_add(1, std::memory_order_relaxed);
  f.t.op->complete({});
}

void completer_main(const std::shared_ptr<worker_state>& w) {
  if (auto s = w->core->backend->set_device(w->device); !s) fail_worker(*w, s);
  for (;;) {
    in_flight f;
    {
      std::unique_lock lk(w->mu);
      w->cv.wait(lk, [&] { return !w->flights.empty() || w->flights_closed; });
      if (w->flights.empty()) return;  // closed and drained
      f = std::move(w->flights.front());
    }
    finish(*w, f);
    {
      std::lock_guard g(w->mu);
      w->flights.pop_front();  // its event slot is free again only now
    }
    w->cv.notify_all();
  }
}

void starter_main(const std::shared_ptr<worker_state>& w) {
  if (auto s = w->core->backend->set_device(w->device); !s) fail_worker(*w, s);
  std::uint64_t started = 0;
  for (;;) {
    // The next task once the pipeline has room; the barrier only once it is empty, so the barrier
    // still means "everything queued before it has completed".
    task next;
    {
      std::unique_lock lk(w->mu);
      w->cv.wait(lk, [&] {
        if (w->queue.empty()) return false;
        return w->queue.front().kind == task_kind::barrier ? w->flights.empty()
                                                           : w->flights.size() < pipeline_depth;
      });
      next = std::move(w->queue.front());
      w->queue.pop_front();
    }
    if (next.kind == task_kind::barrier) break;
    in_flight f;
    if (start(*w, next, started % pipeline_depth, f)) {
      ++started;
      {
        std::lock_guard g(w->mu);
        w->flights.push_back(std::move(f));
      }
      w->cv.notify_all();
    }
  }
  {
    std::lock_guard g(w->mu);
    w->flights_closed = true;
  }
  w->cv.notify_all();
  w->completer.join();
  // The drain barrier: every task queued before it has completed. One last flush of the stream.
  status flushed;
  if (const int code = FAULTLINE_POINT("registry/worker/drain")) {
    flushed = status::injected_fault("registry/worker/drain", code);
  } else {
    flushed = w->core->backend->synchronize_stream(w->stream);
  }
  if (!flushed) fail_worker(*w, flushed);
  bool on_its_own;
  {
    std::lock_guard g(w->mu);
    w->exited = true;
    on_its_own = w->abandoned;
  }
  w->cv.notify_all();
  if (on_its_own) {
    // Nobody joins an abandoned worker; its stream and events are its own to destroy.
    device::backend& be = *w->core->backend;
    for (const device::event e : w->events) (void)be.destroy_event(e);
    (void)be.destroy_stream(w->stream);
  }
  w->core->workers_running.fetch_sub(1, std::memory_order_acq_rel);
}

}  // namespace

void op_state::complete(status s) {
  {
    std::lock_guard g(mu);
    result = std::move(s);
    done = true;
  }
  cv.notify_all();
}

worker_state::~worker_state() {
  // The last reference can go on one of these very threads, or at process exit while they end:
  // a detach the system refuses (the thread is already gone) must not terminate the process.
  for (std::thread* t : {&thread, &completer}) {
    if (!t->joinable()) continue;
    try {
      t->detach();
    } catch (const std::system_error&) {
    }
  }
}

std::string describe(const worker_state& w) {
  return std::string(w.role == worker_role::save ? "save" : "load") + " worker (device " + std::to_string(w.device) +
         ") of '" + w.id + "' generation " + std::to_string(w.generation);
}

status start_worker(const std::shared_ptr<worker_state>& w) {
  try {
    w->completer = std::thread([w] { completer_main(w); });
  } catch (const std::system_error& e) {
    return {errc::internal, "registry: cannot start the " + describe(*w) + ": " + e.what()};
  }
  w->core->workers_running.fetch_add(1, std::memory_order_acq_rel);
  try {
    w->thread = std::thread([w] { starter_main(w); });
  } catch (const std::system_error& e) {
    w->core->workers_running.fetch_sub(1, std::memory_order_acq_rel);
    {
      std::lock_guard g(w->mu);
      w->flights_closed = true;
    }
    w->cv.notify_all();
    w->completer.join();
    return {errc::internal, "registry: cannot start the " + describe(*w) + ": " + e.what()};
  }
  return {};
}

void enqueue(worker_state& w, task t) {
  {
    std::lock_guard g(w.mu);
    w.queue.push_back(std::move(t));
  }
  w.cv.notify_all();
}

bool wait_exited(worker_state& w, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lk(w.mu);
  return w.cv.wait_until(lk, deadline, [&] { return w.exited; });
}

bool abandon(worker_state& w) {
  std::lock_guard g(w.mu);
  if (w.exited) return false;
  w.abandoned = true;
  return true;
}

std::vector<task> take_pending(worker_state& w) {
  std::vector<task> out;
  std::lock_guard g(w.mu);
  std::deque<task> keep;
  for (task& t : w.queue) {
    if (t.kind == task_kind::barrier) {
      keep.push_back(std::move(t));
    } else {
      out.push_back(std::move(t));
    }
  }
  w.queue.swap(keep);
  return out;
}

status error_of(worker_state& w) {
  std::lock_guard g(w.mu);
  return w.error;
}

std::size_t queued(worker_state& w) {
  std::lock_guard g(w.mu);
  std::size_t n = 0;
  for (const task& t : w.queue) n += t.kind != task_kind::barrier;
  return n;
}

}  // namespace faultline::core::registry::detail
