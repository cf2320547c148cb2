"""The broker's services around the store, without the network: config files, consumer offsets, topics and
subscription groups, retry and dead letters, and the Broker facade that composes them with one MessageStore.

Imports the store; the store never imports this package. One module per RocketMQ concept:

| module | RocketMQ |
|---|---|
| fastjson | the text fastjson writes and reads (bare integer keys, sorted fields, tab-indented pretty format) |
| config_manager | ConfigManager, MixAll.string2File / file2String (here crash-safe, with the .bak fallback) |
| data_version | DataVersion |
| topic_validator | TopicValidator, PermName |
| topic_config, topic_config_manager | TopicConfig, TopicConfigManager (topics.json) |
| subscription_group_config, subscription_group_manager | SubscriptionGroupConfig, SubscriptionGroupManager |
| consumer_offset_manager | ConsumerOffsetManager (consumerOffset.json) |
| send_back | SendMessageProcessor.consumerSendMsgBack: retry topic, DLQ |
| mix_all | MixAll / MessageConst names |
| broker_config, broker | BrokerConfig, the broker's processors over the store |
| broker_conf | BrokerStartup's broker.conf (Properties.load + MixAll.properties2Object) |
"""
from .broker import Broker
from .broker_config import BrokerConfig
from .consumer_offset_manager import ConsumerOffsetManager
from .errors import (BrokerError, ConfigFileError, IllegalNameError, InvalidConfigError, MessageNotFoundError,
                     NoPermissionError, OffsetIllegalError, PutFailedError, QueueIdIllegalError,
                     SubscriptionGroupNotExistError, TopicNotExistError)
from .subscription_group_config import SubscriptionGroupConfig
from .subscription_group_manager import SubscriptionGroupManager
from .topic_config import TopicConfig
from .topic_config_manager import TopicConfigManager

__all__ = [
    "Broker", "BrokerConfig", "TopicConfig", "SubscriptionGroupConfig", "TopicConfigManager",
    "SubscriptionGroupManager", "ConsumerOffsetManager", "BrokerError", "ConfigFileError", "IllegalNameError",
    "InvalidConfigError",
    "MessageNotFoundError", "NoPermissionError", "OffsetIllegalError", "PutFailedError", "QueueIdIllegalError",
    "SubscriptionGroupNotExistError", "TopicNotExistError",
]
