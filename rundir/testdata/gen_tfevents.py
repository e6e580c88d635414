"""Writes the tensorboard fixtures of rundir's tests with torch's SummaryWriter,
the writer DeepSpeed's TensorBoardMonitor calls (add_scalar(tag, value,
global_samples) for each event, then flush). Needs torch and tensorboard:

    python gen_tfevents.py   # in rundir/testdata

tensorboard-deepspeed/: a data-parallel run, train_batch_size 8, steps 1-3,
then a second writer (a job resumed from its step-2 checkpoint) replaying
step 3 with another loss and adding step 4; a data-parallel engine's x
values (train_loss at (step-1)*8 as DeepSpeed's wrote it before 0.19.8,
which writes no train_loss there; lr and loss_scale at step*8).
tensorboard-newstyle/: the same first run written with new_style=True
(scalars as one-element tensors)."""
import os
import shutil
import time

from torch.utils.tensorboard import SummaryWriter

TBS = 8


def run(d, steps, loss, new_style=False):
    w = SummaryWriter(log_dir=d)
    for s, l in zip(steps, loss):
        events = [("Train/Samples/train_loss", l, (s - 1) * TBS),
                  ("Train/Samples/lr", 0.001 * s, s * TBS),
                  ("Train/Samples/loss_scale", 65536.0, s * TBS)]
        for e in events:
            w.add_scalar(*e, new_style=new_style)
        w.flush()
    w.close()


for d in ("tensorboard-deepspeed", "tensorboard-newstyle"):
    shutil.rmtree(d, ignore_errors=True)
run("tensorboard-deepspeed", [1, 2, 3], [4.0, 3.0, 9.0])
time.sleep(1.1)  # the resumed job's file is named by a later start time
run("tensorboard-deepspeed", [3, 4], [2.0, 1.0])
run("tensorboard-newstyle", [1, 2, 3], [4.0, 3.0, 2.0], new_style=True)
for d in ("tensorboard-deepspeed", "tensorboard-newstyle"):
    print(d, sorted(os.listdir(d)))
