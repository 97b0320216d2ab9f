"""royalefleet: self-play training for RoyaleGym agents as rollout, learner, ladder, checkpoint and
evaluator services. A trained bot in your own code: ``royalefleet.load_bot`` (royalefleet/bot.py;
importing it starts nothing and imports no torch until a bot is loaded)."""

from royalefleet.bot import Bot, BotRefused, export_bot, load_bot

__all__ = ["Bot", "BotRefused", "export_bot", "load_bot"]
