#include "runtime/train/train_step.h"

#include <cmath>

#include "runtime/optim/lr_schedule.h"

namespace trainer::train {

TrainStep::TrainStep(const config::RunConfig& cfg, Backend& be, model::Gpt& model, DataParallel dp)
    : cfg_(cfg), be_(be), model_(model), dp_(dp) {
  const int64_t n = model_.layout().total_numel();
  opt_ = std::make_unique<optim::AdamW>(be_, model_.layout(), 0, n);
  buckets_ = std::make_unique<parallel::GradBuckets>(model_.layout(), model_.grads(), dp_.comm,
                                                     cfg.parallel.bucket_mb,
                                                     cfg.parallel.overlap_grad_reduce);
  model_.hooks().unit_grads_ready = [this](int unit) { buckets_->unit_ready(unit); };
  const size_t bt = static_cast<size_t>(cfg.train.micro_batch) * cfg.model.seq_len;
  inputs_.resize(bt);
  targets_.resize(bt);
  model_.allocate_activations(cfg.train.micro_batch, cfg.model.seq_len);
}

StepResult TrainStep::run(int step, const BatchSource& next_batch) {
  const config::TrainConfig& t = cfg_.train;
  const int accum = t.grad_accum;
  // The loss is a mean over all B*T*accum*dp tokens of the global batch; each micro-batch's
  // gradient is scaled so that the dp sum of the accumulated gradients is that mean's gradient.
  const double tokens_global = static_cast<double>(inputs_.size()) * accum * dp_.size();
  const float dloss_scale = static_cast<float>(1.0 / tokens_global);

  be_.zero(model_.grads());
  double loss_sum = 0;
  for (int micro = 0; micro < accum; ++micro) {
    next_batch(inputs_.data(), targets_.data());
    if (micro == accum - 1) buckets_->begin_final_backward();
    loss_sum += model_.forward(inputs_.data(), targets_.data(), dloss_scale);
    model_.backward();
  }
  buckets_->finish();

  StepResult r;
  r.comm_wait_s = buckets_->last_wait_seconds();
  r.loss = loss_sum / accum;
  if (dp_.size() > 1) r.loss = dp_.comm->all_reduce_scalar(r.loss, dist::ReduceOp::avg);
  // Gradients are replicated after the all-reduce, so the local norm is the global one.
  r.grad_norm = std::sqrt(be_.sum_squares(model_.grads()));
  r.lr = optim::learning_rate(t, step);
  r.nonfinite = !std::isfinite(r.grad_norm) || !std::isfinite(r.loss);
  if (r.nonfinite) return r;  // skip the update: the weights stay finite
  if (t.grad_clip > 0 && r.grad_norm > t.grad_clip) {
    be_.scale(model_.grads(), static_cast<float>(t.grad_clip / (r.grad_norm + 1e-6)));
    r.clipped = true;
  }
  opt_->step(model_.params(), model_.grads(), static_cast<float>(r.lr), static_cast<float>(t.beta1),
             static_cast<float>(t.beta2), static_cast<float>(t.eps),
             static_cast<float>(t.weight_decay));
  model_.refresh_compute_weights();
  return r;
}

OwnedState TrainStep::owned_state() {
  // Without ZeRO every replica updates all elements; dp rank 0 is the one that owns them.
  OwnedState s;
  if (dp_.rank() != 0) return s;
  s.begin = opt_->begin();
  s.end = opt_->end();
  s.params = static_cast<float*>(model_.params().data) + s.begin;
  s.m = static_cast<float*>(opt_->m().data);
  s.v = static_cast<float*>(opt_->v().data);
  s.adam_step = opt_->step_count();
  return s;
}

void TrainStep::sync_params_from_owners() {
  if (dp_.size() > 1) {
    Tensor p = model_.params();
    dp_.comm->broadcast(p.data, static_cast<size_t>(p.numel()), dist::CommDType::f32, 0);
    // Replicas keep their own moments in zero 0: give them the owner's too.
    dp_.comm->broadcast(opt_->m().data, static_cast<size_t>(opt_->m().numel()),
                        dist::CommDType::f32, 0);
    dp_.comm->broadcast(opt_->v().data, static_cast<size_t>(opt_->v().numel()),
                        dist::CommDType::f32, 0);
    int64_t t = opt_->step_count();
    dp_.comm->broadcast(&t, 1, dist::CommDType::i64, 0);
    opt_->set_step_count(t);
  }
  model_.refresh_compute_weights();
}

double TrainStep::evaluate(int batches, const BatchSource& next_batch) {
  double sum = 0;
  for (int i = 0; i < batches; ++i) {
    next_batch(inputs_.data(), targets_.data());
    sum += model_.forward(inputs_.data(), targets_.data(), 0.0f);
  }
  double mean = sum / std::max(1, batches);
  if (dp_.size() > 1) mean = dp_.comm->all_reduce_scalar(mean, dist::ReduceOp::avg);
  return mean;
}

}  // namespace trainer::train
