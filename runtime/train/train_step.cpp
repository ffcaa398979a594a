#include "runtime/train/train_step.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "runtime/core/check.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/parallel/tp_grad_norm.h"
#include "runtime/parallel/zero_layout.h"

namespace trainer::train {

namespace {

constexpr int kExpertRowsTag = 1;  // (the ep group carries nothing else point-to-point)

// Every rank's `rows` (any dtype: gathered as bytes) into `whole`, in rank order.
std::function<void(const Tensor&, Tensor)> all_gather_hook(dist::Comm& comm) {
  return [&comm](const Tensor& rows, Tensor whole) {
    TRAINER_CHECK(
        whole.nbytes() == rows.nbytes() * static_cast<size_t>(comm.size()) &&
            whole.dtype == rows.dtype,
        comm.name() << " all-gather of " << rows.shape.str() << " into " << whole.shape.str());
    comm.all_gather(rows.data, whole.data, rows.nbytes(), dist::CommDType::u8);
  };
}

// The sum over the group of `whole` (fp32), of which this rank keeps its block in `rows`.
std::function<void(const Tensor&, Tensor)> reduce_scatter_hook(dist::Comm& comm) {
  return [&comm](const Tensor& whole, Tensor rows) {
    TRAINER_CHECK(
        whole.dtype == DType::f32 && rows.dtype == DType::f32 &&
            whole.numel() == rows.numel() * comm.size(),
        comm.name() << " reduce-scatter of " << whole.shape.str() << " into " << rows.shape.str());
    comm.reduce_scatter(whole.data, rows.data, static_cast<size_t>(rows.numel()),
                        dist::CommDType::f32, dist::ReduceOp::sum);
  };
}

// Hooks::ep_all_to_all_rows over `comm`: the filled start of each row block, to its rank, as one
// batch of point-to-point transfers (a variable-size all-to-all: only the kept choices' rows
// travel, not the blocks' capacity); this rank's own block is a device copy.
std::function<void(const Tensor&, Tensor, const std::vector<int64_t>&, const std::vector<int64_t>&)>
all_to_all_rows_hook(dist::Comm& comm, Backend& be) {
  return [&comm, &be](const Tensor& send, Tensor recv, const std::vector<int64_t>& send_rows,
                      const std::vector<int64_t>& recv_rows) {
    const int ranks = comm.size(), me = comm.rank();
    TRAINER_CHECK(send.shape == recv.shape && send.dtype == recv.dtype && send.shape.rank == 2 &&
                      send.shape[0] % ranks == 0 && send_rows.size() == size_t(ranks) &&
                      recv_rows.size() == size_t(ranks),
                  comm.name() << " all-to-all of rows of " << send.shape.str() << " into "
                              << recv.shape.str());
    const int64_t block = send.shape[0] / ranks, width = send.shape[1];
    const size_t row_bytes = static_cast<size_t>(width) * dtype_size(send.dtype);
    std::vector<dist::P2pTransfer> transfers;
    for (int j = 0; j < ranks; ++j) {
      const int64_t out = send_rows[size_t(j)], in = recv_rows[size_t(j)];
      TRAINER_CHECK(out >= 0 && out <= block && in >= 0 && in <= block,
                    comm.name() << " all-to-all: " << out << " rows to rank " << j << ", " << in
                                << " from it, of blocks of " << block);
      if (j == me) {
        TRAINER_CHECK(out == in, comm.name() << " all-to-all: " << out << " rows to itself, " << in
                                             << " expected");
        be.copy(recv.slice(j * block * width, in * width),
                send.slice(j * block * width, out * width));
        continue;
      }
      const size_t at = static_cast<size_t>(j * block) * row_bytes;
      transfers.push_back({true, static_cast<char*>(send.data) + at,
                           static_cast<size_t>(out) * row_bytes, j, kExpertRowsTag});
      transfers.push_back({false, static_cast<char*>(recv.data) + at,
                           static_cast<size_t>(in) * row_bytes, j, kExpertRowsTag});
    }
    comm.send_recv_batch(transfers);
  };
}

}  // namespace

TrainStep::TrainStep(const config::RunConfig& cfg, Backend& be, model::Gpt& model, DataParallel dp,
                     TensorParallel tp, PipelineParallel pp, ContextParallel cp, ExpertParallel ep)
    : cfg_(cfg), be_(be), model_(model), dp_(dp), tp_(tp), pp_(pp), cp_(cp), ep_(ep) {
  const model::GptShard& shard = model_.layout().shard();
  TRAINER_CHECK(tp_.size() == shard.tp_size, "the tp group has " << tp_.size()
                                                                 << " ranks; the model is cut in "
                                                                 << shard.tp_size);
  TRAINER_CHECK(cp_.size() == shard.cp_size && cp_.rank() == shard.cp_rank,
                "cp rank " << cp_.rank() << " of " << cp_.size() << "; the model runs chunks of "
                           << "cp rank " << shard.cp_rank << " of " << shard.cp_size);
  TRAINER_CHECK(ep_.size() == shard.ep_size && ep_.rank() == shard.ep_rank,
                "ep rank " << ep_.rank() << " of " << ep_.size()
                           << "; the model holds the experts of "
                           << "ep rank " << shard.ep_rank << " of " << shard.ep_size);
  const int64_t n = model_.layout().total_numel();
  const bool zero_shards = parallel::zero_shards_state(cfg.parallel.zero, dp_.size());
  if (zero_shards) {
    zero_ = std::make_unique<parallel::ZeroOptimizer>(cfg.parallel.zero, be_, model_, *dp_.comm,
                                                      ep_.size() > 1 ? ep_.replicas : nullptr);
  } else {  // zero 0, or a single replica (nothing to shard)
    opt_ = std::make_unique<optim::AdamW>(be_, model_.layout(), 0, n);
    buckets_ = std::make_unique<parallel::GradBuckets>(
        model_.layout(), model_.grads(), dp_.comm, cfg.parallel.bucket_mb,
        cfg.parallel.overlap_grad_reduce, ep_.size() > 1 ? ep_.replicas : nullptr);
    model_.hooks().unit_grads_ready = [this](int unit) { buckets_->unit_ready(unit); };
  }
  TRAINER_CHECK(pp_.size() == 1 || !zero_ || cfg.parallel.zero == 1,
                "parallel.zero = " << cfg.parallel.zero << " with pipeline parallelism");
  if (tp_.size() > 1) {  // the row-parallel layers' partial sums, forward and backward
    model_.hooks().tp_all_reduce = [this](Tensor t) {
      TRAINER_CHECK(t.dtype == DType::f32, "tp all-reduce of a non-fp32 tensor");
      tp_.comm->all_reduce(t.data, static_cast<size_t>(t.numel()), dist::CommDType::f32,
                           dist::ReduceOp::sum);
    };
    // sequence parallelism: rows gathered, partial sums scattered
    model_.hooks().tp_all_gather = all_gather_hook(*tp_.comm);
    model_.hooks().tp_reduce_scatter = reduce_scatter_hook(*tp_.comm);
  }
  if (ep_.size() > 1)  // tokens to their experts and back
    model_.hooks().ep_all_to_all = [this](const Tensor& send, Tensor recv) {
      TRAINER_CHECK(send.nbytes() == recv.nbytes() && send.dtype == recv.dtype &&
                        send.nbytes() % static_cast<size_t>(ep_.size()) == 0,
                    "ep all-to-all of " << send.shape.str() << " into " << recv.shape.str());
      ep_.comm->all_to_all(send.data, recv.data, send.nbytes() / static_cast<size_t>(ep_.size()),
                           dist::CommDType::u8);
    };
  if (ep_.size() > 1) model_.hooks().ep_all_to_all_rows = all_to_all_rows_hook(*ep_.comm, be_);
  if (cp_.size() > 1) {  // the attention's qkv gathered, its gradient scattered
    model_.hooks().cp_all_gather = all_gather_hook(*cp_.comm);
    model_.hooks().cp_reduce_scatter = reduce_scatter_hook(*cp_.comm);
  }
  // fp8's amax group is dp (x cp) x tp, Megatron's: the max over the tp slices is the whole
  // tensor's amax, so every rank scales as one process would.
  // An expert's group: the ranks that hold it (its dp / ep replicas, and the tp ranks, which
  // route different rows to the same experts).
  const auto amax_all_reduce = [](std::initializer_list<dist::Comm*> group) {
    return [comms = std::vector<dist::Comm*>(group)](Tensor amaxes) {
      for (dist::Comm* c : comms)
        if (c != nullptr && c->size() > 1)
          c->all_reduce(amaxes.data, static_cast<size_t>(amaxes.numel()), dist::CommDType::f32,
                        dist::ReduceOp::max);
    };
  };
  if (dp_.size() > 1 || tp_.size() > 1)
    model_.hooks().fp8_amax_all_reduce = amax_all_reduce({dp_.comm, tp_.comm});
  if (ep_.size() > 1)
    model_.hooks().fp8_expert_amax_all_reduce = amax_all_reduce({ep_.replicas, tp_.comm});
  const int T = cfg.model.seq_len / cp_.size();  // this rank's tokens of each sequence
  const size_t bt = static_cast<size_t>(cfg.train.micro_batch) * static_cast<size_t>(T);
  inputs_.resize(bt);
  targets_.resize(bt);
  if (cp_.size() > 1) {
    sequence_inputs_.resize(bt * static_cast<size_t>(cp_.size()));
    sequence_targets_.resize(sequence_inputs_.size());
  }
  const model::Recompute recompute = model::parse_recompute(cfg.activation_checkpointing);
  if (pp_.size() == 1) {
    model_.allocate_activations(cfg.train.micro_batch, T, recompute);
    return;
  }
  pipeline_ = std::make_unique<parallel::PipelineRunner>(
      model_, *pp_.comm, parallel::parse_pipe_schedule(cfg.parallel.pipeline.schedule),
      cfg.parallel.pipeline.microbatches, cfg.train.micro_batch, T, recompute);
}

void TrainStep::next_micro_batch(const BatchSource& next_batch) {
  if (cp_.size() == 1) {
    next_batch(inputs_.data(), targets_.data());
    return;
  }
  next_batch(sequence_inputs_.data(), sequence_targets_.data());
  const model::GptShard& s = model_.layout().shard();
  const size_t T = static_cast<size_t>(cfg_.model.seq_len), L = T / (2 * cp_.size());
  for (size_t b = 0; b < static_cast<size_t>(cfg_.train.micro_batch); ++b)
    for (int half = 0; half < 2; ++half) {
      const size_t from = b * T + static_cast<size_t>(s.context_chunk(half)) * L,
                   to = (2 * b + static_cast<size_t>(half)) * L;
      std::copy_n(sequence_inputs_.begin() + static_cast<long>(from), L,
                  inputs_.begin() + static_cast<long>(to));
      std::copy_n(sequence_targets_.begin() + static_cast<long>(from), L,
                  targets_.begin() + static_cast<long>(to));
    }
}

void TrainStep::reduce_moe_stats(double tokens_global, StepResult& r) {
  const int accum = cfg_.train.grad_accum;
  // [balance loss, dropped choices]: summed over the stages' blocks, then over the replicas
  double v[2] = {model_.take_moe_balance_loss() / (accum * cfg_.train.micro_batch),
                 static_cast<double>(model_.take_moe_dropped())};
  PhaseProfiler::Scope p(profiler_, "loss_all_reduce", 0);
  // (both in one collective per group; the tp ranks route different sequences)
  for (dist::Comm* comm : {pp_.comm, dp_.comm, tp_.comm})
    if (comm != nullptr && comm->size() > 1)
      comm->all_reduce(v, 2, dist::CommDType::f64, dist::ReduceOp::sum);
  r.moe_aux_loss = v[0] / dp_.size();
  const double choices = tokens_global * cfg_.model.moe.top_k * cfg_.model.n_layer;
  r.moe_dropped_fraction = v[1] / choices;
}

double TrainStep::forward_backward(float dloss_scale, bool final_micro_batch) {
  // the buckets reduce during the backward that makes the gradients final
  auto arm = [&] {
    if (buckets_ && final_micro_batch) buckets_->begin_final_backward();
  };
  if (!pipeline_) {
    arm();
    model_.begin_fp8_amaxes();
    const double loss = model_.forward(inputs_.data(), targets_.data(), dloss_scale);
    model_.backward();
    model_.end_fp8_amaxes();
    return loss;
  }
  const double loss = pipeline_->train(inputs_.data(), targets_.data(), dloss_scale, arm);
  if (final_micro_batch && zero_) {
    // ZeRO 1 reduce-scatters each stage's whole buffer, so the tied copies' gradients sit in
    // different shards: sum them before (and resync the copy after the update, run()).
    PhaseProfiler::Scope p(profiler_, "pp_tied_embedding", 0);
    pipeline_->sum_tied_embedding_grads();
  }
  return loss;
}

void TrainStep::set_profiler(PhaseProfiler* profiler) {
  profiler_ = profiler;
  if (pipeline_) pipeline_->set_profiler(profiler);
  model_.set_profiler(profiler);
}

StepResult TrainStep::run(int step, const BatchSource& next_batch) {
  const config::TrainConfig& t = cfg_.train;
  const int accum = t.grad_accum;
  // The loss is a mean over all B*T*accum*dp tokens of the global batch; each micro-batch's
  // gradient is scaled so that the dp sum of the accumulated gradients is that mean's gradient.
  // (Under context parallelism inputs_ holds T / cp tokens per sequence, and dp_ is dp x cp.)
  const double tokens_global = static_cast<double>(inputs_.size()) * accum * dp_.size();
  const float dloss_scale = static_cast<float>(1.0 / tokens_global);

  {
    PhaseProfiler::Scope p(profiler_, "zero_grads", 0);
    if (zero_)
      zero_->begin_step();  // zero 2/3 free the full-size gradient pages instead of zeroing them
    else
      be_.zero(model_.grads());
  }
  model_.take_moe_balance_loss();  // (drops what evaluations added)
  model_.take_moe_dropped();
  double loss_sum = 0;
  for (int micro = 0; micro < accum; ++micro) {
    {
      PhaseProfiler::Scope p(profiler_, "data", 0);  // host work: device time only if it waits
      next_micro_batch(next_batch);
    }
    loss_sum += forward_backward(dloss_scale, micro == accum - 1);
  }

  StepResult r;
  {
    PhaseProfiler::Scope p(profiler_, "grad_reduce_and_norm", 0);
    const auto t0 = std::chrono::steady_clock::now();
    r.grad_norm = reduce_and_norm();
    r.comm_wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  r.loss = loss_sum / accum;
  if (pp_.size() > 1) {  // the last stage's
    PhaseProfiler::Scope p(profiler_, "loss_all_reduce", 0);
    r.loss = pp_.comm->all_reduce_scalar(r.loss, dist::ReduceOp::sum);
  }
  if (dp_.size() > 1) {
    PhaseProfiler::Scope p(profiler_, "loss_all_reduce", 0);
    r.loss = dp_.comm->all_reduce_scalar(r.loss, dist::ReduceOp::avg);
  }
  if (cfg_.model.moe.num_experts > 0) reduce_moe_stats(tokens_global, r);
  r.lr = optim::learning_rate(t, step);
  r.nonfinite = !std::isfinite(r.grad_norm) || !std::isfinite(r.loss);
  if (r.nonfinite) return r;  // skip the update: the weights stay finite
  PhaseProfiler::Scope p(profiler_, "optimizer", 0);
  clip_and_update(r.grad_norm, r.lr, r);
  if (pipeline_ && zero_) {
    // The dp reductions of the tied copies' (equal) gradients ran in buffers of other shapes, so
    // in another order: at dp > 2 the updates may differ in the last bit. The first stage's
    // weights are the ones checkpoints keep; the last stage takes them. (inside the optimizer
    // phase)
    pipeline_->copy_tied_embedding_to_last_stage();
  }
  return r;
}

double TrainStep::reduce_and_norm() {
  const bool sp = model_.layout().shard().sequence_parallel;
  if (zero_) {  // the norm is summed over the shards, never taken on one rank's part
    zero_->reduce_gradients();
    if (sp)
      for (size_t i = 0; i < zero_->owned_count(); ++i)
        parallel::sum_row_partial_grads(model_.layout(), zero_->owned_grads(i),
                                        zero_->owned(i).begin, *tp_.comm);
    return zero_->grad_norm(tp_.comm, pp_.comm);
  }
  buckets_->finish();
  if (pipeline_) {
    // Megatron's order: the tied copies' gradients after their dp reductions, so that both end
    // stages add the same two numbers and their copies of wte stay equal bit for bit. (inside
    // the grad_reduce_and_norm phase)
    pipeline_->sum_tied_embedding_grads();
  }
  if (sp) parallel::sum_row_partial_grads(model_.layout(), model_.grads(), 0, *tp_.comm);
  // Gradients are replicated over dp after the all-reduce; over tp each rank holds its slice,
  // over pp its stage's layers.
  // (under expert parallelism each rank holds its experts, and a copy of the rest)
  double sum = parallel::tp_weighted_sum_squares(be_, model_.layout(), model_.grads(), 0);
  for (dist::Comm* c : {tp_.comm, pp_.comm, ep_.comm})
    if (c != nullptr && c->size() > 1) sum = c->all_reduce_scalar(sum, dist::ReduceOp::sum);
  return std::sqrt(sum);
}

void TrainStep::clip_and_update(double grad_norm, double lr, StepResult& r) {
  const config::TrainConfig& t = cfg_.train;
  float clip = 1.0f;  // applied as AdamW reads the gradients (AdamWParams::grad_scale)
  if (t.grad_clip > 0 && grad_norm > t.grad_clip) {
    clip = static_cast<float>(t.grad_clip / (grad_norm + 1e-6));
    r.clipped = true;
  }
  const float lr_f = static_cast<float>(lr), b1 = static_cast<float>(t.beta1),
              b2 = static_cast<float>(t.beta2), eps = static_cast<float>(t.eps),
              wd = static_cast<float>(t.weight_decay);
  if (zero_) {
    zero_->step(lr_f, b1, b2, eps, wd, clip);  // updates the shard, then gathers or releases params
    return;
  }
  // The step rewrites the bf16 weight copy too (bf16 compute), in the same pass.
  opt_->step(model_.params(), model_.grads(), lr_f, b1, b2, eps, wd, model_.bf16_copy(), clip);
}

parallel::ZeroMemory TrainStep::state_bytes() const {
  parallel::ZeroMemory m =
      zero_
          ? zero_->memory()
          : parallel::ZeroMemory{
                static_cast<int64_t>(model_.params().nbytes() + model_.compute_copy_bytes()),
                static_cast<int64_t>(model_.grads().nbytes()), static_cast<int64_t>(opt_->bytes())};
  // a pipeline end stage's buffer for the other end's wte gradient
  if (pipeline_) m.grads += static_cast<int64_t>(pipeline_->tied_grad_bytes());
  return m;
}

size_t TrainStep::activation_bytes() const {
  return model_.activation_bytes() + (pipeline_ ? pipeline_->grad_inbox_bytes() : 0);
}

void TrainStep::init_weights(uint64_t seed) {
  if (!zero_ || zero_->stage() < 3) {
    model_.init_weights(seed);
    return;
  }
  std::vector<model::Gpt::ElementRange> owned;  // (parallel::Range, which model cannot include)
  for (size_t i = 0; i < zero_->owned_count(); ++i)
    owned.push_back({zero_->owned(i).begin, zero_->owned(i).end});
  model_.init_weights_within(seed, owned);
  zero_->sample_residency();  // (the report's memory before the first step: the shard held)
}

OwnedState TrainStep::owned_state() {
  float* params = static_cast<float*>(model_.params().data);
  if (zero_) {  // every rank owns its shard of each segment
    OwnedState s;
    for (size_t i = 0; i < zero_->owned_count(); ++i) {
      optim::AdamW& a = zero_->adam(i);
      s.runs.push_back({a.begin(), a.end(), params + a.begin(), static_cast<float*>(a.m().data),
                        static_cast<float*>(a.v().data)});
    }
    s.adam_step = zero_->adam_step();
    return s;
  }
  // Without ZeRO every replica updates all elements; dp rank 0 is the one that owns them (under
  // expert parallelism the ranks of ep group 0: checkpoints take only their experts from all but
  // the first, ckpt::saved_pieces).
  OwnedState s;
  const dist::Comm* owners = owner_group();
  if (owners != nullptr && owners->rank() != 0) return s;
  s.runs.push_back({opt_->begin(), opt_->end(), params + opt_->begin(),
                    static_cast<float*>(opt_->m().data), static_cast<float*>(opt_->v().data)});
  s.adam_step = opt_->step_count();
  return s;
}

void TrainStep::sync_params_from_owners() {
  if (zero_) {  // each rank loaded its own shard and moments: make the working params whole
    zero_->publish_params();
    return;
  }
  if (dist::Comm* owners = owner_group(); owners != nullptr && owners->size() > 1) {
    Tensor p = model_.params();
    owners->broadcast(p.data, static_cast<size_t>(p.numel()), dist::CommDType::f32, 0);
    // Replicas keep their own moments in zero 0: give them the owner's too.
    owners->broadcast(opt_->m().data, static_cast<size_t>(opt_->m().numel()), dist::CommDType::f32,
                      0);
    owners->broadcast(opt_->v().data, static_cast<size_t>(opt_->v().numel()), dist::CommDType::f32,
                      0);
    int64_t t = opt_->step_count();
    owners->broadcast(&t, 1, dist::CommDType::i64, 0);
    opt_->set_step_count(t);
  }
  model_.refresh_compute_weights();
}

dist::Comm* TrainStep::owner_group() const {
  return ep_.size() > 1 ? ep_.replicas : dp_.comm;
}

void TrainStep::seed_fp8_weight_scales() {
  // The owned master weights are valid on every stage (ZeRO 3 releases the rest).
  const OwnedState owned = owned_state();
  std::vector<float> host;
  // amax(|w|) over the flat elements [begin, begin + n) this rank owns
  const auto owned_amax = [&](int64_t begin, int64_t n) {
    float amax = 0;
    for (const ckpt::OwnedShard& run : owned.runs) {
      const int64_t lo = std::max(run.begin, begin), hi = std::min(run.end, begin + n);
      if (lo >= hi) continue;
      host.resize(static_cast<size_t>(hi - lo));
      be_.to_host(host.data(), model_.params().slice(lo, hi - lo));
      for (const float v : host) amax = std::max(amax, std::fabs(v));
    }
    return amax;
  };
  const model::ParamLayout& layout = model_.layout();
  const model::GptShard& shard = layout.shard();
  const bool moe = layout.dims().moe();
  std::vector<float> amaxes(static_cast<size_t>(model_.fp8_linears()), 0.0f);
  for (int l = 0; l < shard.num_layers; ++l) {
    const std::string block = "h." + std::to_string(shard.global_layer(l)) + ".";
    // Gpt's linear order; a mixture-of-experts block has no dense MLP (its two stay 0)
    const char* linears[] = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                             "mlp.c_proj.weight"};
    for (int which = 0; which < (moe ? 2 : 4); ++which) {
      const model::ParamSpec& p = layout.find(block + linears[which]);
      amaxes[static_cast<size_t>(l) * 4 + static_cast<size_t>(which)] =
          owned_amax(p.offset, p.numel);
    }
    if (!moe) continue;
    const char* expert_linears[] = {"mlp.experts.c_fc.weight", "mlp.experts.c_proj.weight"};
    for (int which = 0; which < 2; ++which) {
      const model::ParamSpec& p = layout.find(block + expert_linears[which]);  // [E / ep, ...]
      const int64_t experts = p.local_shape[0], per = p.numel / experts;
      for (int e = 0; e < experts; ++e)
        amaxes[static_cast<size_t>(model_.fp8_expert_linear(l, e, which))] =
            owned_amax(p.offset + e * per, per);
    }
  }
  model_.seed_fp8_weight_scales(amaxes);
}

double TrainStep::evaluate(int64_t global_batches, const BatchSource& next_batch) {
  const int64_t batches = global_batches * cfg_.train.grad_accum;
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) {
    next_micro_batch(next_batch);
    sum += pipeline_ ? pipeline_->evaluate(inputs_.data(), targets_.data())
                     : model_.forward(inputs_.data(), targets_.data(), 0.0f);
  }
  double mean = sum / static_cast<double>(std::max<int64_t>(1, batches));
  if (pp_.size() > 1) mean = pp_.comm->all_reduce_scalar(mean, dist::ReduceOp::sum);
  if (dp_.size() > 1) mean = dp_.comm->all_reduce_scalar(mean, dist::ReduceOp::avg);
  return mean;
}

}  // namespace trainer::train
