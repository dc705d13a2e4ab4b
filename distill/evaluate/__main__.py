"""`python -m distill.evaluate`: see distill/evaluate/job.py."""

from distill.evaluate.job import main

if __name__ == "__main__":
    main()
