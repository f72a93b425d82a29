#!/usr/bin/env python3
"""The soak test's PyTorch trial (Determined's Core API on kdet, CPU): a
linear model on synthetic data, small enough for a busy 2-core machine.
It follows the searcher's operations, reports training and validation
metrics, checkpoints after each validation and resumes from the latest
checkpoint. Like fashion-mnist-c --print-reports, it writes what it
reports to $SOAK_OUT/<trial>.<run id>.<rank>.log: `report KIND batches=N
{json}` before a row is handed over, `acked validation batches=N` after
the controller acknowledged a validation (and every row before it)."""
import json
import os

import torch
import torch.nn.functional as F

import determined as det


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return x, x @ torch.linspace(-1, 1, 8).unsqueeze(1) + 0.1


def main():
    info = det.get_cluster_info()
    hp = info.trial.hparams
    out = open(os.path.join(os.environ["SOAK_OUT"], f"{os.environ['KDET_TRIAL_ID']}."
                            f"{os.environ['KDET_RUN_ID']}.{os.environ.get('RANK', '0')}.log"),
               "a", buffering=1)
    out.write(f"trial-int-id {os.environ.get('KDET_TRIAL_INT_ID', '')}\n")
    torch.manual_seed(info.trial.trial_seed if hasattr(info.trial, "trial_seed") else 1)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=float(hp["learning_rate"]))
    bs = int(hp["global_batch_size"])
    x, y = data(512, 1)
    vx, vy = data(64, 2)
    batches = 0
    with det.core.init() as core:
        if info.latest_checkpoint is not None:
            with core.checkpoint.restore_path(info.latest_checkpoint) as path:
                st = torch.load(path / "state.pth")
            model.load_state_dict(st["model"])
            opt.load_state_dict(st["opt"])
            batches = st["batches"]
            out.write(f"restored batches={batches}\n")
        for op in core.searcher.operations():
            while batches < op.length:
                i = (batches * bs) % (x.shape[0] - bs)
                loss = F.mse_loss(model(x[i:i + bs]), y[i:i + bs])
                opt.zero_grad()
                loss.backward()
                opt.step()
                batches += 1
                if batches % 8 == 0:
                    m = {"loss": loss.item()}
                    out.write(f"report training batches={batches} {json.dumps(m)}\n")
                    core.train.report_training_metrics(steps_completed=batches, metrics=m)
                    op.report_progress(batches)
                    if core.preempt.should_preempt():
                        break
            with torch.no_grad():
                m = {"validation_loss": F.mse_loss(model(vx), vy).item()}
            out.write(f"report validation batches={batches} {json.dumps(m)}\n")
            core.train.report_validation_metrics(steps_completed=batches, metrics=m)
            out.write(f"acked validation batches={batches}\n")
            with core.checkpoint.store_path({"steps_completed": batches}) as (path, _):
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                            "batches": batches}, path / "state.pth")
            if core.preempt.should_preempt():
                return
            op.report_completed(m["validation_loss"])


if __name__ == "__main__":
    main()
