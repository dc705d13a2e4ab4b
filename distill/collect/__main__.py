"""`python -m distill.collect`: see distill/collect/job.py."""

from distill.collect.job import main

if __name__ == "__main__":
    main()
