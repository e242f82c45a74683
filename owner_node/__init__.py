"""The owner daemon: site policy, privacy budget, answering studies (train, release, sign), durable outbox."""
