// The evaluator process of a job (cluster.evaluator; ps_worker --evaluator,
// which ps_launch starts beside the workers): it measures the model on the
// program's held-out data while the workers train, so that no training
// worker stops for it (without it worker 0 evaluates between its steps,
// and is the job's slowest worker while it does).
//
// It is a client of its own kind (kEvaluatorWorker): it pulls, beats and
// says goodbye, holds no clock and is never waited for. Every
// train.eval_every clocks of the job, and at train.iterations, it pulls
// what its evaluation needs at that clock; each shard answers once every
// worker has finished the clocks below it (the pull waits there; under
// bsp it then reads exactly the model of those clocks), so an evaluation
// is labelled with the job's clock, not with one worker's. When it falls
// behind (an evaluation slower than eval_every clocks of training) it
// skips to the next multiple of eval_every above the clock it last saw.
// After the last one it leaves; the shards serve it until then, also after
// the workers left (server.exit_when_workers_leave waits for it, unless it
// is silent for liveness.timeout_ms).
//
// Each evaluation is a log line ("evaluator: clock 400 of 2000: test
// accuracy 0.8312 ..."), a row of train.metrics_csv (worker "evaluator")
// and, with metrics.port, the ps_evaluator_* series.
#ifndef PS_WORKER_EVALUATOR_H_
#define PS_WORKER_EVALUATOR_H_

#include "worker/programs.h"

namespace ps {

// Runs the evaluator of `program` to the end of the job; returns
// ps_worker's exit code: 0 after the evaluation at train.iterations, 1 when
// the job ended before it or an evaluation failed (logged, saying why).
// REQUIRES: program.evaluation; context.client of kEvaluatorWorker and
// context.store over it.
int RunEvaluator(const ProgramContext& context, const TrainProgram& program);

}  // namespace ps

#endif  // PS_WORKER_EVALUATOR_H_
