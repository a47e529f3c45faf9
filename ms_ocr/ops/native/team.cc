// The decode kernels' thread team (team.h): its workers' loop and the process's team.
#include "team.h"

namespace ms_ocr {

void SpinTeam::start(const std::shared_ptr<SpinTeam>& team) {
  // (through a lambda, a type of no linkage: std::thread's code for it stays inside the library)
  for (int tid = 1; tid < team->size_; ++tid) std::thread([team, tid] { work(team, tid); }).detach();
}

void SpinTeam::work(std::shared_ptr<SpinTeam> t, int tid) {
  uint64_t seen = 0;  // the epoch the team starts at: a job run before this thread got here is still ahead
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 1; t->epoch_.load(std::memory_order_acquire) == seen; ++i) {
      if (i % 256) cpu_pause();
      else std::this_thread::yield();
      if (i % 1024 == 0 && std::chrono::steady_clock::now() - t0 > kIdleSpin) {
        std::unique_lock<std::mutex> lk(t->m_);
        t->sleepers_.fetch_add(1);  // seq_cst: a run() that misses it has already advanced epoch_
        t->cv_.wait(lk, [&] { return t->epoch_.load() != seen; });
        t->sleepers_.fetch_sub(1);
      }
    }
    seen = t->epoch_.load(std::memory_order_acquire);
    if (t->stop_.load()) return;
    if (tid < t->job_n_) t->fn_(t->ctx_, TeamCtx{tid, t->job_n_, t->barrier_});
    t->pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

namespace {
std::mutex g_team_mutex;
std::shared_ptr<SpinTeam> g_team;
}  // namespace

std::shared_ptr<SpinTeam> decode_team() {
  std::lock_guard<std::mutex> lk(g_team_mutex);
  if (!g_team || g_team->size() != g_threads) {
    if (g_team) g_team->stop();
    g_team = std::make_shared<SpinTeam>(g_threads);
    SpinTeam::start(g_team);
  }
  return g_team;
}

}  // namespace ms_ocr
