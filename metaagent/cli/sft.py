"""`metaagent-sft`: Supervised fine-tuning (cold start) on distilled chat data."""

from ._stub import stub


def main() -> None:
    stub("metaagent-sft", "Supervised fine-tuning (cold start) on distilled chat data.")


if __name__ == "__main__":
    main()
