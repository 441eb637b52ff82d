"""The model catalogue as this service runs it: each model's window, default budget and prices."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import TenantDep
from api.errors import ERROR_RESPONSES
from api.schemas import ModelList, ModelView, PricesView, RatesView, TierView
from models.catalogue import CATALOGUE, model_spec
from models.pricing import Prices, Rates, Unpriced, prices_of
from models.settings import get_settings

router = APIRouter(prefix="/v1/models", tags=["models"], responses=ERROR_RESPONSES)


@router.get("")
def list_models(_tenant: TenantDep) -> ModelList:
    """Every model a job may name, with the operator's overrides (PLIMSOLL_MODELS, PLIMSOLL_PRICES): its window,
    default budget, output limit, lifecycle, and its prices now with where they came from."""
    settings = get_settings()
    listed: list[ModelView] = []
    for name in sorted({*CATALOGUE, *settings.models}):
        spec = model_spec(name, settings.models)
        try:
            prices, unpriced = _prices_view(prices_of(name, settings)), None
        except Unpriced as error:
            prices, unpriced = None, str(error)
        listed.append(
            ModelView(
                name=spec.name,
                provider=spec.provider,
                context_limit=spec.context_limit,
                default_budget=spec.default_budget,
                max_output_tokens=spec.max_output_tokens,
                retires=spec.retires,
                replacement=spec.replacement,
                prices=prices,
                unpriced=unpriced,
            )
        )
    return ModelList(default_model=settings.default_model, models=listed)


def _rates_view(rates: Rates) -> RatesView:
    return RatesView(
        input=float(rates.input),
        output=float(rates.output),
        cache_write_5m=float(rates.cache_write_5m),
        cache_write_1h=float(rates.cache_write_1h),
        cache_read=float(rates.cache_read),
    )


def _prices_view(prices: Prices) -> PricesView:
    return PricesView(
        rates=_rates_view(prices.rates),
        tiers=[TierView(above_input_tokens=start, rates=_rates_view(rates)) for start, rates in prices.tiers],
        priced_as=prices.priced_as,
        source=prices.source,
        since=prices.since,
        at=prices.at,
    )
