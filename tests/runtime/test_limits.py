"""Each platform's limits live in one table; the time budget default follows Kaggle's."""

from nbutils.runtime import limits


def test_the_platform_limits():
    assert limits.default_budget_min(limits.for_platform("kaggle")) == 690.0
    assert limits.default_budget_min(limits.for_platform("local")) is None
    assert limits.for_platform("somewhere") == limits.LIMITS["local"]
    assert "30 GPU h a week" in limits.for_platform("kaggle").describe()
