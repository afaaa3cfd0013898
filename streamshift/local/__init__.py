"""The embedded local stack: the single-node Kafka broker and the demo."""
