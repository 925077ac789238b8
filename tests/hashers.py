from django.contrib.auth.hashers import Argon2PasswordHasher


class FastArgon2PasswordHasher(Argon2PasswordHasher):
    """Argon2id with small costs, so a test that signs up a few accounts does
    not spend seconds hashing. Same algorithm name and hash format."""

    time_cost = 1
    memory_cost = 1024
    parallelism = 1
