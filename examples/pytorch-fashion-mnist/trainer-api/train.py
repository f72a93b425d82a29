#!/usr/bin/env python3
"""Train FashionMNISTTrial with the Trainer API, on the cluster (the
experiment's entrypoint: `python3 train.py`) or off-cluster as a plain
script (`python3 train.py --epochs 1 --train-examples 2000`)."""
import argparse
import logging

import determined as det
from determined import pytorch

import model_def

HPARAMS = {"global_batch_size": 64, "learning_rate": 0.05, "hidden_units": 128,
           "momentum": 0.9, "gamma": 0.9}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=1, help="off-cluster: epochs to train")
    ap.add_argument("--train-examples", type=int, default=None)
    ap.add_argument("--validation-examples", type=int, default=None)
    ap.add_argument("--validation-period", type=int, default=None,
                    help="in batches (default: off-cluster 100, on the cluster the "
                         "config's min_validation_period)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)

    info = det.get_cluster_info()
    hparams = exp_conf = None
    period = args.validation_period
    if info is None:  # off-cluster: our own hyperparameters and data slice
        hparams = HPARAMS
        exp_conf = {"data": {"train_examples": args.train_examples,
                             "validation_examples": args.validation_examples}}
        period = period or 100
    with pytorch.init(hparams=hparams, exp_conf=exp_conf) as train_context:
        trial = model_def.FashionMNISTTrial(train_context)
        trainer = pytorch.Trainer(trial, train_context)
        trainer.fit(max_length=pytorch.Epoch(args.epochs),
                    validation_period=pytorch.Batch(period) if period else None)


if __name__ == "__main__":
    main()
