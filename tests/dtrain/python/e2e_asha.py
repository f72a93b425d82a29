"""A Core API trial for adaptive_asha with time_metric: it trains on its
own (the searcher's operation has no length), reports a validation every
5 steps carrying the time metric `epochs` (one epoch is 5 steps), and stops
when ctx.preempt.should_preempt() says so: the searcher stopped it at a
rung or it completed the top one. Every trial reports the same loss at
every epoch, so the first to reach a rung goes on and the others, later
and no better, are stopped (ties rank after earlier results). A loss that
fell with the epochs would let a trial whose first validation the
controller picks up late (a busy machine: it sees the latest one) rank
ahead of earlier ones at the rung."""
import time

import determined as det

with det.core.init() as ctx:
    steps = 0
    for op in ctx.searcher.operations():
        while not ctx.preempt.should_preempt():
            time.sleep(0.04)
            steps += 1
            if steps % 5 == 0:
                ctx.train.report_validation_metrics(steps, {"validation_loss": 1.0,
                                                            "epochs": steps // 5})
            if steps > 500:  # the searcher never answered: give up (the test fails)
                raise SystemExit("no decision from the searcher after 100 epochs")
        break
    print(f"stopped at step {steps}", flush=True)
