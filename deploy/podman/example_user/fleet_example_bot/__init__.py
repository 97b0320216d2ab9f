"""The Compose integration test's user package (deploy/podman/compose_it.py): a reward of the
user's own, built into the images with ``FLEET_USER_CODE=deploy/podman/example_user`` and named
by deploy/config/tiny-example-reward.json. docs/extending.md walks through the same route."""
