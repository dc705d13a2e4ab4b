"""The training script: what `accelerate launch` starts, once per process.

    accelerate launch -q --config_file configs/accelerate/zero2.yaml distill/train.py \
        --config configs/train/default.yaml [--key value ...]
    python distill/train.py --data runs/collect-default --output runs/train-default     # one CPU process

The job is in the package beside this file: distill/train/job.py.
"""

from distill.train.job import main

if __name__ == "__main__":
    main()
