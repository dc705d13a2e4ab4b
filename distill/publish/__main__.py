"""`python -m distill.publish`: see distill/publish/job.py."""

from distill.publish.job import main

if __name__ == "__main__":
    main()
