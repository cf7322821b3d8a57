/* The runtime's activations and work space, counted with the layout's own
 * tables (layout/): one micro-batch chunk's kept frame, the whole model's
 * activation table, the work space and token buffers, the MoE state's
 * buffers, and the most frames a rank's pipeline schedule keeps at once;
 * with the paper accounting's frame for the other precisions and
 * architectures (plan_paper.c). */
#include "layout/layout.h"
#include "planner/plan.h"
#include "planner/plan_mem_impl.h"

/* The runtime's sizes of model m on a rank of tensor parallel tp (with
 * sequence parallel sp), context parallel cp and recompute mode: the
 * layout's, with a Llama's SwiGLU of width ffn as the runtime sets it
 * (parallel/mp_pipe.c msr_mp_dims; model/gpt_tensors.c on the whole
 * model): gate and up 2 ffn / tp wide, their product ffn / tp. */
static msr_layout_dims_t plan_dims(const msr_plan_model_t *m, int micro_batch, int tp, int sp,
                                   int cp, int mode, int head_chunk)
{
    msr_layout_dims_t d =
        msr_layout_dims(micro_batch, m->seq, m->channels, m->heads, m->vocab, tp, sp, cp, mode);
    if (m->arch == MSR_PLAN_LLAMA) {
        d.Hl = m->ffn / tp;
        d.glu = 1;
    }
    msr_layout_head_chunk(&d, head_chunk);
    return d;
}

/* The sizes of layout l's ranks on the model-parallel runtime. */
static msr_layout_dims_t layout_dims(const msr_plan_model_t *m, const msr_plan_layout_t *l)
{
    return plan_dims(m, l->micro_batch, l->tp, l->sp, msr_plan_cp(l), l->recompute, l->head_chunk);
}

/* ---- activations (parallel/mp_pipe.c msr_mp_carve_frame) ---- */

/* fp32 elements one micro-batch chunk of `layers` blocks keeps, the
 * runtime's (GPT or Llama): the layout's table, which the runtime carves
 * its frames from. */
uint64_t msr_plan_frame_elems(const msr_plan_model_t *m, const msr_plan_layout_t *l, int layers,
                              int head)
{
    msr_layout_dims_t d = layout_dims(m, l);
    return msr_layout_frame_elems(&d, layers, head);
}

/* train_gpt runs the whole model without the model-parallel runtime when
 * tp = pp = 1 with no recompute and the whole head (parallel/train.c
 * msr_train_uses_mp; its --trace would switch it on). */
int msr_plan_whole_path(const msr_plan_layout_t *l)
{
    return l->tp == 1 && l->pp == 1 && msr_plan_cp(l) == 1 && l->chunks == 1 && !l->sp &&
           l->recompute == MSR_PLAN_RC_NONE && l->head_chunk == 0;
}

/* fp32 elements of the whole model's activation table for b sequences:
 * the layout's, which model/gpt.c carves. */
uint64_t msr_plan_whole_acts_elems(const msr_plan_model_t *m, const msr_plan_layout_t *l)
{
    msr_layout_dims_t d = plan_dims(m, l->micro_batch, 1, 0, 1, MSR_LAYOUT_RECOMPUTE_NONE, 0);
    return msr_layout_whole_elems(&d, m->layers);
}

/* ---- the runtime's work space ---- */

/* A Llama's ring with fewer kv heads than heads (parallel/mp.c alloc_cp):
 * the kv heads of a chunk of T/2 rows repeated for their query heads, and
 * the repeated heads' gradients, (T/2, 2 C/tp) each, what the ring's
 * kernels take; 0 without cp or for a GPT. */
static uint64_t ring_kv_repeat_elems(const msr_plan_model_t *m, const msr_layout_dims_t *d)
{
    if (d->cp == 1 || m->arch != MSR_PLAN_LLAMA || m->kv_heads == m->heads)
        return 0;
    return 2 * (uint64_t)(d->T / 2) * 2 * (uint64_t)d->Cl;
}

/* Bytes of the work space and token buffers a rank allocates besides its
 * parameters, state and kept activations; *scratch_p the blocks' shared
 * scratch among them. Whole model: the layout's whole-model work table
 * (msr_layout_whole_work, which model/gpt.c carves, one attention head's
 * datt) and the model's and the trainer's inputs and targets, N ints each.
 * Model parallel: the layout's work table (msr_layout_work, which
 * parallel/mp.c carves) and the ints context parallel adds, with the
 * trainer's inputs and targets for every micro-batch of the step (whole
 * sequences under cp), and a Llama's ring's repeated kv heads. */
uint64_t msr_plan_work_bytes(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                             uint64_t *scratch_p)
{
    *scratch_p = 0;
    uint64_t N = (uint64_t)l->micro_batch * (uint64_t)m->seq;
    if (msr_plan_whole_path(l)) {
        msr_layout_dims_t d = plan_dims(m, l->micro_batch, 1, 0, 1, MSR_LAYOUT_RECOMPUTE_NONE, 0);
        return msr_layout_whole_work_elems(&d, 1) * MSR_PLAN_F32 + 4 * N * sizeof(int32_t);
    }
    uint64_t trainer = 2 * N * (uint64_t)l->micros * sizeof(int32_t);
    msr_layout_dims_t d = layout_dims(m, l);
    *scratch_p = msr_layout_work(&d, MSR_WORK_SCRATCH) * MSR_PLAN_F32;
    return msr_layout_work_elems(&d) * MSR_PLAN_F32 +
           msr_layout_work_ints(&d, l->micros) * sizeof(int32_t) + trainer +
           ring_kv_repeat_elems(m, &d) * MSR_PLAN_F32;
}

/* The MoE state's buffers: the layout's MoE table (msr_layout_moe_work,
 * which model/moe.c allocates from) for micro-batches of N = b T tokens
 * (a rank's b T / cp of them under cp, the capacity the group's),
 * floats of fw bytes: a slot per MoE block the rank runs and frame (a
 * micro-batch whose routing waits for its backward: one on the whole-model
 * path and under full recompute, else the step's micro-batches; under full
 * recompute one slot for all the blocks, which run their forward again
 * just before their backward: model/moe.h's shared layout), the once
 * buffers, the load counters of every MoE block, and under tp without sp
 * on tp ranks but 0 the router's unwanted input gradient. */
uint64_t msr_plan_moe_work_bytes(const msr_plan_model_t *m, const msr_plan_layout_t *l, int blocks,
                                 int tp_rank, uint64_t fw)
{
    uint64_t cp = (uint64_t)msr_plan_cp(l), C = (uint64_t)m->channels;
    uint64_t N = (uint64_t)l->micro_batch * (uint64_t)m->seq / cp;
    /* an expert's fc outputs: 4C, or a Llama's gate and up, 2F (model/moe.c) */
    uint64_t H = m->arch == MSR_PLAN_LLAMA ? 2 * (uint64_t)m->ffn : 4 * C;
    msr_layout_moe_dims_t d = msr_layout_moe_dims_cp(N, cp, (uint64_t)m->experts,
                                                     (uint64_t)m->top_k, m->capacity_factor, C, H);
    int frames = msr_plan_whole_path(l) || l->recompute == MSR_PLAN_RC_FULL ? 1 : l->micros;
    int slots = l->recompute == MSR_PLAN_RC_FULL && blocks > 0 ? 1 : blocks;
    int rdx = l->tp > 1 && !l->sp && tp_rank > 0;
    return msr_layout_moe_work_bytes(&d, slots, frames, m->layers / m->moe_every, rdx, fw);
}

/* Walks rank pr's schedule (layout/pipe_order.h, the runtime's order):
 * a forward opens a frame of its chunk, its backward closes it. Returns the
 * most bytes alive at once; *held_p the most frames. */
uint64_t msr_plan_schedule_peak(const msr_plan_layout_t *l, int pr, const uint64_t *chunk_bytes,
                                int *held_p)
{
    uint64_t live = 0, peak = 0;
    int held = 0, most = 0;
    int n = msr_pipe_ops_to_peak(l->schedule, l->micros, l->pp, pr, l->chunks);
    for (int k = 0; k < n; k++) {
        msr_pipe_op_t o = msr_pipe_op_at(l->schedule, l->micros, l->pp, pr, l->chunks, k);
        if (o.backward) {
            live -= chunk_bytes[o.c];
            held--;
            continue;
        }
        live += chunk_bytes[o.c];
        held++;
        peak = msr_plan_max_u64(peak, live);
        most = held > most ? held : most;
    }
    *held_p = most;
    return peak;
}

/* ---- the bf16 products' operand scratch (model/layers_bf16.c) ---- */

/* The largest op(A) and op(B) of the products a linear layer of N rows,
 * IC inputs and OC outputs runs (model/layers_impl.h): forward inp (N,IC)
 * x W (OC,IC); backward dout (N,OC) x W, and dout (N,OC) x inp (N,IC). */
static void linear_operands(uint64_t N, uint64_t IC, uint64_t OC, uint64_t *a, uint64_t *b)
{
    *a = msr_plan_max_u64(*a, N * msr_plan_max_u64(IC, OC));
    *b = msr_plan_max_u64(*b, msr_plan_max_u64(OC * IC, N * IC));
}

/* Bytes of bf16 operand scratch rank o's products context holds after a
 * step of train_gpt --precision bf16: the context keeps one buffer for
 * op(A) and one for op(B), each grown to the largest it has rounded
 * (msr_products_scratch_bytes), so the count is the largest A and the
 * largest B over the products the rank's part runs: its blocks' four
 * linear layers on all N rows of its positions (tp's shares), attention's
 * per-head products (T x T and T x head size; under cp the ring's half
 * chunks S = T / 2), the MoE router and experts, and the tied head
 * (N x V / tp) on the rank that holds it; and without cp (whose ring
 * kernels hold nothing) attention's two held operands (msr_products_hold:
 * q, k and v, N x the qkv width, and the output's gradient, N x Cl; under
 * tp's overlap each copy's N / 2 rows). The layout's dims are the
 * runtime's (layout/). Exact, except where an expert's product is the
 * largest: its rows are the tokens routed to it, counted here at their
 * most (min(capacity, N)), so then a bound (exact when every expert is
 * full, e.g. top-k = E). */
uint64_t msr_plan_bf16_scratch_bytes(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                                     int blocks, int moe_blocks, int has_head)
{
    msr_layout_dims_t d = layout_dims(m, l);
    uint64_t N = d.N, C = (uint64_t)d.C, Cl = (uint64_t)d.Cl, Hl = (uint64_t)d.Hl;
    uint64_t T = (uint64_t)d.T, HS = (uint64_t)(m->channels / m->heads), a = 0, b = 0;
    /* q, k and v's outputs: 3 Cl, or a Llama's Cl and its kv heads' k and
     * v (model/block.c qkv_width); its gate and up 2 Hl (glu) */
    uint64_t qkv = 3 * Cl, fc = d.glu ? 2 * Hl : Hl;
    if (m->arch == MSR_PLAN_LLAMA)
        qkv = Cl + 2 * (uint64_t)msr_plan_kv_heads_local(m, l->tp) * HS;
    if (blocks > 0) {
        linear_operands(N, C, qkv, &a, &b);
        linear_operands(N, Cl, C, &a, &b);
        uint64_t S = msr_plan_cp(l) > 1 ? T / 2 : T; /* the ring's chunks, or all of T */
        a = msr_plan_max_u64(a, S * msr_plan_max_u64(S, HS));
        b = msr_plan_max_u64(b, S * HS);
    }
    if (blocks > moe_blocks) {
        linear_operands(N, C, fc, &a, &b);
        linear_operands(N, Hl, C, &a, &b);
    }
    if (moe_blocks > 0) {
        /* an expert's hidden width and fc outputs: 4C, or a Llama's F and
         * its gate and up, 2F */
        uint64_t H = m->arch == MSR_PLAN_LLAMA ? (uint64_t)m->ffn : 4 * C;
        uint64_t HF = m->arch == MSR_PLAN_LLAMA ? 2 * H : H;
        msr_layout_moe_dims_t md =
            msr_layout_moe_dims_cp(N, (uint64_t)msr_plan_cp(l), (uint64_t)m->experts,
                                   (uint64_t)m->top_k, m->capacity_factor, C, HF);
        /* an expert runs each source rank's tokens routed to it: at most
         * its capacity, and at most the N tokens (each routed to it once);
         * fewer when the routing says so, which only a step can tell */
        uint64_t rows = msr_plan_min_u64(md.cap, N);
        linear_operands(N, C, (uint64_t)m->experts, &a, &b);
        linear_operands(rows, C, HF, &a, &b);
        linear_operands(rows, H, C, &a, &b);
    }
    if (has_head) /* a chunked head's product is a chunk's rows */
        linear_operands(N, C, (uint64_t)(d.hc > 0 ? d.hc : d.Vl), &a, &b);
    uint64_t held = 0;
    if (blocks > 0 && msr_plan_cp(l) == 1) {
        uint64_t rows = l->tp_overlap ? N / 2 : N;
        held = rows * qkv + rows * Cl;
    }
    return (a + b + held) * 2; /* bf16 */
}
