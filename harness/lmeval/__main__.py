from harness.runner.lmeval_cli import main

if __name__ == "__main__":
    main()
