from distill.peers.job import main

if __name__ == "__main__":
    main()
