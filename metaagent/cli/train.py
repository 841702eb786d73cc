"""`train-metaagent`: Train the designer and executor roles with stagewise hierarchical GRPO."""

from ._stub import stub


def main() -> None:
    stub("train-metaagent", "Train the designer and executor roles with stagewise hierarchical GRPO.")


if __name__ == "__main__":
    main()
